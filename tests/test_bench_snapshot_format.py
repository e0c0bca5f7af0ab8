"""bench/bench_snapshot_format.py --quick: the snapshot cache written and opened in both
formats (the codec, sqlite3), each open checked to give the writer's very tables, and a
ratio of sqlite3 against the codec reported for every metric."""

from __future__ import annotations

import re

from helpers.bench_scripts import run_bench


def test_quick_run_reports_both_formats_against_each_other() -> None:
    done = run_bench(
        "bench_snapshot_format.py",
    )
    assert done.returncode == 0, done.stderr
    for metric in ("write (CPU)", "warm open (CPU)", "cold open (CPU)"):
        row = rf"^\| 200 steps: {re.escape(metric)} \| [\d,.]+ ms \| [\d,.]+ ms \| [\d,.]+x \|"
        assert re.search(row, done.stdout, re.M), done.stdout
