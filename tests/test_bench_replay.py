"""bench/bench_replay.py --quick --repeats 1: a restarted kernel replays a 20-cell notebook
of agent cells (no request sent), beside its python calls run as plain cells, and the
script reports each replay's cost and a cell's wait before its first request."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.bench_scripts import run_bench


@pytest.mark.slow
def test_quick_run_times_replayed_cells_and_the_first_request_against_plain_cells(
    tmp_path: Path,
) -> None:
    done = run_bench(
        "bench_replay.py",
        "--repeats",
        "1",
        "--dir",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == [], "the script left files behind"
    out = done.stdout
    metrics = [
        "Run All of 20 replayed cells",
        *(
            f"a replayed cell, {calls} python calls, {answer} answer"
            for calls in (0, 3, 20)
            for answer in ("short", "long")
        ),
        "cell start to the first request",
    ]
    for metric in metrics:
        for kind in ("CPU", "wall"):
            cells = r"[\d,.]+ ms \([+-][\d,.]+ ms\) \| [\d,.]+ ms"
            row = rf"^\| 10 earlier runs: {re.escape(metric)}[^|]*, {kind} \| {cells} \|"
            assert re.search(row, out, re.M), (metric, kind, out)
    assert re.search(r"a kernel's first request [^|]* \| [\d,.]+ ms / [\d,.]+ ms \|", out), out
