"""bench/bench_open.py: the script opens sessions of two sizes from their file alone, as a
reader and as a writer, beside reading the file and `json.loads` of every line, and
reports each ratio. Run at 1k and 2k facts, one round: its quick sizes (1k and 10k, three
rounds) spent most of their time building the 10k session, and the script's path is the
same at any size."""

from __future__ import annotations

import re
from pathlib import Path

from helpers.bench_scripts import run_bench


def test_quick_run_reports_each_open_against_the_raw_read(tmp_path: Path) -> None:
    done = run_bench(
        "bench_open.py", "--sizes", "1000,2000", "--repeats", "1", "--dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == [], "the script left files behind"
    for opener in ("load_session", "SessionStore.open"):
        for size in ("1k", "2k"):
            metric = rf"{re.escape(opener)} of {size} facts \([\d.]+ MB\)"
            row = rf"^\| {metric} \| [\d,.]+ ms \| [\d,.]+ ms [^|]*\| [\d.]+x \|"
            assert re.search(row, done.stdout, re.M), done.stdout
