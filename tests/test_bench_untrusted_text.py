"""bench/bench_untrusted_text.py --quick: the passes every piece of untrusted text goes
through (safe_text, clean_text) cost on hostile input what its length says."""

from __future__ import annotations

import re

from helpers.bench_scripts import run_bench

ROW = re.compile(
    r"^\| (?P<metric>[^|]+) \| [\d,.]+ ms \| [\d,.]+ ms \| (?P<ratio>[\d,.]+)x \|", re.M
)


def test_hostile_text_costs_what_its_length_says() -> None:
    done = run_bench(
        "bench_untrusted_text.py",
        timeout=600,  # against a hang only: a quadratic pass takes ~40 s a call here
    )
    assert done.returncode == 0, done.stderr
    ratios = {m["metric"]: float(m["ratio"].replace(",", "")) for m in ROW.finditer(done.stdout)}
    assert len(ratios) == 5, done.stdout
    # Hostile / ordinary text of the same length, in CPU time measured in the same run:
    # 1-25x when linear, thousands when quadratic (the script's docstring).
    assert all(ratio <= 100 for ratio in ratios.values()), done.stdout
