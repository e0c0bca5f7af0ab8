"""bench/bench_snapshot_format.py --quick: the snapshot cache written and opened in both
formats (the codec, sqlite3), each open checked to give the writer's very tables, and a
ratio of sqlite3 against the codec reported for every metric."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_snapshot_format.py"


def test_quick_run_reports_both_formats_against_each_other() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for metric in ("write (CPU)", "warm open (CPU)", "cold open (CPU)"):
        row = rf"^\| 200 steps: {re.escape(metric)} \| [\d,.]+ ms \| [\d,.]+ ms \| [\d,.]+x \|"
        assert re.search(row, done.stdout, re.M), done.stdout
