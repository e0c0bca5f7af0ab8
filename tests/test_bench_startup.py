"""bench/bench_startup.py --quick --sizes 1000: a fresh process loads the extension on a
session a dead kernel left open, and the script reports import, open, recovery and memory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.bench_scripts import run_bench


@pytest.mark.slow
def test_quick_run_times_each_part_of_load_ext_and_weighs_the_session(tmp_path: Path) -> None:
    done = run_bench(
        "bench_startup.py",
        "--sizes",
        "1000",
        "--dir",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == [], "the script left files behind"
    out = done.stdout
    assert "### 1k facts (" in out, out
    for metric in (
        "%load_ext with its import, CPU",
        "resident memory kept (RSS after - before)",
        "held by Python objects (tracemalloc)",
    ):
        assert re.search(rf"\| 1k facts \([\d.]+ MB\): {re.escape(metric)} \| [\d,.]+ [mM]", out)
    # Every part is timed; a process that found no open run would have failed the script.
    for part in ("import `tiny_agent_nb.notebook`", "open the store", "recovery (`_recover`)"):
        assert re.search(rf"\| {re.escape(part)}[^|]* \| [\d,]+ ms \(\d+\) \|", out), out
    assert "httpx was imported" not in out, out
