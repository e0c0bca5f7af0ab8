"""Run one benchmark script against two versions of the package, interleaved, in one run.

    python bench/bench_ab.py --before /tmp/old --after . --rounds 3 -- bench/bench_loop.py --quick

`--before` and `--after` are directories holding a `tiny_agent_nb` package (e.g. a
`git archive` of an older commit, and this tree); the script given after `--` is run
with each first on PYTHONPATH, alternating which goes first every round, so a noisy
neighbour on a shared machine hits both sides alike. The rows of the scripts' main
tables (`| metric | tiny-agent-nb | baseline | ratio | ...`) are collected and shown side
by side: the median of each side's ratio column over the rounds, and every value, so
the spread is visible. It is a report, not a test.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

RATIO = re.compile(r"([0-9][0-9,]*\.?[0-9]*)x?\s*$")


def table_rows(output: str) -> dict[str, str]:
    """metric -> the row's ratio cell (the fourth column), for every main-table row."""
    rows: dict[str, str] = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and line.startswith("|") and not set(cells[0]) <= {"-", " "}:
            rows.setdefault(cells[0].strip("*"), cells[3])
    return rows


def ratio(cell: str) -> float | None:
    match = RATIO.search(cell.replace("*", ""))
    return float(match.group(1).replace(",", "")) if match else None


def run(tree: Path, script: Sequence[str]) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    done = subprocess.run(
        [sys.executable, *script], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    sides = {"before": args.before, "after": args.after}
    seen: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for round_ in range(args.rounds):
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for side in order:
            for metric, cell in table_rows(run(sides[side], script)).items():
                value = ratio(cell)
                if value is not None:
                    seen[side].setdefault(metric, []).append(value)
        print(f"round {round_ + 1}/{args.rounds} done, load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"\n`{' '.join(script)}`, {args.rounds} rounds each side, interleaved\n")
    print("| metric | before (median ratio; all) | after (median ratio; all) |")
    print("|---|---|---|")
    for metric, before in seen["before"].items():
        after = seen["after"].get(metric, [])

        def cell(values: list[float]) -> str:
            if not values:
                return "—"
            every = ", ".join(f"{v:.2f}" for v in values)
            return f"{statistics.median(values):.2f} ({every})"

        print(f"| {metric} | {cell(before)} | {cell(after)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
