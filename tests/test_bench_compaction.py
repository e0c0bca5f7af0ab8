"""bench/bench_compaction.py --quick: the script runs and prints each of its ratios (whether
a request after a checkpoint grows with the history is the benchmark's figure, read in its
table: a ratio of timings is no test's assertion, the machine running tests is shared)."""

from __future__ import annotations

import re
from pathlib import Path

from helpers.bench_scripts import run_bench


def test_a_request_after_a_checkpoint_is_timed_at_two_histories(tmp_path: Path) -> None:
    done = run_bench(
        "bench_compaction.py",
        cwd=tmp_path,  # the script writes its sessions under a temporary directory only
    )
    assert done.returncode == 0, done.stderr
    ratios = {
        m["metric"]: float(m["ratio"])
        for m in re.finditer(
            r"^\| (?P<metric>[^|]+) \|.*\| (?P<ratio>[\d.]+)x \|", done.stdout, re.M
        )
    }
    assert set(ratios) == {
        "request after checkpoint, 100 before / tail only",
        "request after checkpoint, 2k before / tail only",
        "flatness: request at 2k / at 100",
        "request at 2k / 1% of a 1 s model call",
    }, done.stdout
    assert all(ratio > 0 for ratio in ratios.values()), done.stdout
