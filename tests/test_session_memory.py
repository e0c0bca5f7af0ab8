"""What decoding a session's lines leaves behind in a kernel's memory."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_agent_nb.session import HeaderInit, SessionStore
from tiny_agent_nb.session._lines import READ_AHEAD

from helpers.bench_scripts import bench_startup
from helpers.scenario import complete_run

_DECODE_EVERY_ENTRY = """
import gc, sys, tracemalloc
from tiny_agent_nb.session import load_session
state = load_session(sys.argv[1])  # no entry decoded yet
gc.collect()
tracemalloc.start()
for entry_id in state.entries:
    state.entries[entry_id]
gc.collect()
print(tracemalloc.get_traced_memory()[0])
"""


@pytest.mark.slow  # 8,000 entries, decoded again in a fresh process
def test_decoding_every_entry_leaves_no_strings_behind(tmp_path: Path) -> None:
    """pydantic caches short strings process-wide (16,384 of them); with values cached,
    a kernel that built its context from a long session kept thousands of its ids in
    that cache for good. Only keys are cached now. A fresh process: its cache is empty."""
    path = tmp_path / "many.agent.jsonl"
    env = str(tmp_path)
    init = HeaderInit(cwd=env, provider="openrouter", model="test/model", environment_identity=env)
    with SessionStore.open(path, create=init) as store:
        for _ in range(2000):  # 8,000 entries: 14,000 distinct ids in their lines
            complete_run(store)
    done = subprocess.run(
        [sys.executable, "-c", _DECODE_EVERY_ENTRY, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    held = int(done.stdout)
    # What stays: the last verified read-ahead of the lines (`_lines.READ_AHEAD`).
    assert held < READ_AHEAD + 100_000, f"{held:,} bytes held after decoding"


_FULL_READ = """
import ctypes, gc, sys
from tiny_agent_nb.session import SessionStore, load_session

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
gc.collect()
before = mallinfo2().fordblks
if sys.argv[2] == "store":  # a writer's open
    state = SessionStore.open(sys.argv[1])
else:
    state = load_session(sys.argv[1])
gc.collect()
print(mallinfo2().fordblks - before)
"""


def _has_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "mallinfo2")
    except OSError:
        return False


# The start-up memory targets, met from Python 3.11 on (3.11.7 and 3.13.0 here). Python
# 3.10.13 keeps more of the same session (why is not known yet): 1.9-2.1x the file kept
# after a first open; after a resume, with the context built, 1.28x traced (peak 0.94x)
# and 1.58x resident. A known miss on the oldest Python the package claims, shown as one
# (xfail), not hidden by a looser bound.
MEMORY_TARGET_FROM_311 = pytest.mark.xfail(
    sys.version_info < (3, 11),
    reason="the memory targets are met from Python 3.11; 3.10 keeps more (see above)",
    strict=False,
)


@pytest.mark.skipif(not _has_mallinfo2(), reason="glibc's mallinfo2 (what is measured)")
@pytest.mark.parametrize("opener", ["load", "store"])
def test_a_first_open_of_a_10k_fact_session_leaves_no_holes_in_the_c_heap(
    tmp_path: Path, startup_session: Path, opener: str
) -> None:
    """An open reads and reduces every line. The 1 MiB chunks of the read, as `bytes`
    freed one after another, raised glibc's mmap threshold, and every later chunk and
    the lines split out of it went into the heap among the tables' records: a fresh
    process kept 4.6 MB of free heap (0.8x the 5.8 MB file) resident after `load_session`
    of bench_startup's 10k-fact session. The scan's one reused memory map (register row
    "scan-map") leaves about none."""
    path = startup_session
    done = subprocess.run(
        [sys.executable, "-c", _FULL_READ, str(path), opener],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    free = int(done.stdout)
    size = path.stat().st_size
    assert free < 0.15 * size, f"{free:,} bytes of free heap kept ({free / size:.2f}x the file)"


@MEMORY_TARGET_FROM_311
def test_a_resumed_10k_fact_kernel_holds_its_tables_and_context_without_a_second_copy(
    tmp_path: Path, startup_session: Path
) -> None:
    """The start-up memory target (1.5x the file, resident, with the first request's
    context built) is bench_startup's figure: a process's resident size also counts the
    free heap, pymalloc's arena slack and the pages of shared libraries a path touches,
    which vary with the process's layout (1.49-1.57x on one quiet machine at one commit,
    1.543x on a CI run), so it is measured and reported there, not asserted here. What
    this test holds is what does not vary, traced by tracemalloc in a fresh IPython on
    bench_startup's 10k-fact session: what Python objects and the context's memory maps
    hold with the context built (1.34x the file), and the peak while `%load_ext` reads
    the file (0.97x). Without the tables' one object per repeated value (`Tables.share`)
    they were 1.65x and 1.28x."""
    bench = bench_startup()
    path = startup_session
    traced = bench.measure(tmp_path, trace=1)
    size = path.stat().st_size
    held, peak = traced["cell_traced"], traced["traced_peak"]
    print(f"held {held / size:.3f}x the file, peak {peak / size:.3f}x")
    assert held <= 1.4 * size, f"{held:,} bytes held ({held / size:.3f}x the file)"
    assert peak <= 1.05 * size, f"a peak of {peak:,} bytes ({peak / size:.3f}x the file)"
