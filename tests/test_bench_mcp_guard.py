"""bench/bench_mcp_guard.py --quick: the script starts `true` under the guard, beside the
bare interpreter doing the same, and reports CPU and wall time of both."""

from __future__ import annotations

import re

from helpers.bench_scripts import run_bench


def test_quick_run_reports_the_guards_start_against_the_bare_interpreter() -> None:
    done = run_bench(
        "bench_mcp_guard.py",
    )
    assert done.returncode == 0, done.stderr
    for metric in ("guarded `true`, CPU", "guarded `true`, wall", "with `site`, CPU (info)"):
        row = rf"^\| [^|]*{re.escape(metric)} \| [\d,.]+ ms \| [\d,.]+ ms \| [\d,.]+x \|"
        assert re.search(row, done.stdout, re.M), done.stdout
