"""What a session's state holds in a kernel's memory, and what it leaves behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tiny_agent_nb.session import HeaderInit, SessionStore

from helpers.bench_scripts import bench_startup
from helpers.scenario import complete_run

_LOAD_AND_LET_GO = """
import gc, sys, tracemalloc
from tiny_agent_nb.session import load_session
gc.collect()
tracemalloc.start()
state = load_session(sys.argv[1])
del state
gc.collect()
print(tracemalloc.get_traced_memory()[0])
"""


@pytest.mark.slow  # 8,000 entries, loaded again in a fresh process
def test_a_state_let_go_leaves_no_strings_behind(tmp_path: Path) -> None:
    """pydantic caches short strings process-wide (16,384 of them); with values cached,
    a kernel that loaded a long session kept thousands of its ids in that cache for good,
    after the state itself was gone. Only keys are cached. A fresh process: its cache is
    empty."""
    path = tmp_path / "many.agent.jsonl"
    env = str(tmp_path)
    init = HeaderInit(cwd=env, provider="openrouter", model="test/model", environment_identity=env)
    with SessionStore.open(path, create=init) as store:
        for _ in range(2000):  # 8,000 entries: 14,000 distinct ids in their lines
            complete_run(store)
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_LET_GO, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    held = int(done.stdout)
    assert held < 200_000, f"{held:,} bytes held after the state was let go"


# The start-up memory targets, measured on Python 3.11 (3.11.7 here); Python 3.10 keeps
# more of the same session, shown as an expected failure there, not hidden by a looser
# bound.
MEMORY_TARGET_FROM_311 = pytest.mark.xfail(
    sys.version_info < (3, 11),
    reason="the memory targets are met from Python 3.11; 3.10 keeps more (see above)",
    strict=False,
)


@MEMORY_TARGET_FROM_311
def test_a_resumed_10k_fact_kernel_holds_its_state_and_context_once(
    tmp_path: Path, startup_session: Path
) -> None:
    """The start-up memory target (docs/benchmarks.md, "Start-up and memory"): a state
    keeps the entries it validated (docs/session-format.md §8.1), ~4x the file in Python
    objects for bench_startup's 10k-fact session. Resident size also counts the free heap
    and pymalloc's arena slack, which vary with the process's layout, so it is reported
    there; what this test holds is traced by tracemalloc in a fresh IPython: what Python
    objects and the context's memory maps hold with the context built (4.29x the file),
    and the peak while `%load_ext` reads the file (4.8x: the file's bytes beside the
    state). A second copy of the history (the lines kept, or entries decoded twice) would
    add 1x and more."""
    bench = bench_startup()
    path = startup_session
    traced = bench.measure(tmp_path, trace=1)
    size = path.stat().st_size
    held, peak = traced["cell_traced"], traced["traced_peak"]
    print(f"held {held / size:.3f}x the file, peak {peak / size:.3f}x")
    assert held <= 4.6 * size, f"{held:,} bytes held ({held / size:.3f}x the file)"
    assert peak <= 5.2 * size, f"a peak of {peak:,} bytes ({peak / size:.3f}x the file)"
