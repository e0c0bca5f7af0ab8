"""Opening a session from its file alone, against reading the file and `json.loads` of
every line, in the same run (CPU time).

    python bench/bench_open.py                     # 1k, 10k and 52k facts, 7 repeats
    python bench/bench_open.py --quick             # 1k and 10k facts, 3 repeats
    python bench/bench_open.py --sizes 52000 --profile   # + cProfile of the largest open

The session is the notebook's mix of bench_startup.py (prompts, ten `read_file` tool steps
with 1 KB results per run, answers with their usage, the last run left open). Timed, each
alternating with the baseline (which goes first alternates):

- `load_session(path)`: a reader's open (no lock, nothing written);
- `SessionStore.open(path).close()`: a writer's open (claim, flock, read, reduce, close);
- baseline: `path.read_bytes()` and `json.loads` of every line, the results kept.

The figure is the fastest run of each side (noise only adds time); the target is a ratio
of at most 3 at every size (docs/benchmarks.md). It is a report, not a test: it exits 0.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _report import Row, print_rows, settle  # noqa: E402
from bench_startup import PRISTINE, build  # noqa: E402

from tiny_agent_nb.session import SessionStore, load_session  # noqa: E402

TARGET = 3.0


def raw_load(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line]


def cpu_of(fn: Callable[[], object]) -> float:
    settle()
    start = time.process_time()
    result = fn()
    seconds = time.process_time() - start
    del result
    return seconds


def measure(path: Path, repeats: int) -> dict[str, list[float]]:
    def reader() -> object:
        return load_session(path)

    def writer() -> object:
        SessionStore.open(path).close()
        return None

    sides: dict[str, Callable[[], object]] = {
        "load_session": reader,
        "SessionStore.open": writer,
        "raw": lambda: raw_load(path),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(repeats):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for name in order:
            times[name].append(cpu_of(sides[name]))
    return times


def label(facts: int) -> str:
    return f"{facts // 1000}k" if facts >= 1000 else str(facts)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--quick", action="store_true", help="1k and 10k facts, 3 repeats")
    parser.add_argument("--profile", action="store_true", help="+ cProfile of the largest")
    parser.add_argument("--dir", help="where the temporary session files go (default: $TMPDIR)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = args.sizes or ([1000, 10_000] if args.quick else [1000, 10_000, 52_000])
    repeats = args.repeats or (3 if args.quick else 7)
    print(
        f"# opening a session from its file alone, CPU time, {repeats} rounds; "
        f"load average {os.getloadavg()[0]:.2f}\n"
    )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-open-", dir=args.dir) as tmp:
        path = Path(tmp) / PRISTINE
        for n in sizes:
            directory = Path(tmp) / label(n)
            directory.mkdir()
            path = build(directory, n)
            mb = path.stat().st_size / 1e6
            times = measure(path, repeats)
            raw = min(times["raw"])
            for side in ("load_session", "SessionStore.open"):
                ours = min(times[side])
                rows.append(
                    Row(
                        f"{side} of {label(n)} facts ({mb:.1f} MB)",
                        f"{ours * 1000:,.1f} ms",
                        f"{raw * 1000:,.1f} ms (read + json.loads per line)",
                        ours / raw,
                        TARGET,
                    )
                )
        print_rows(rows)
        print(f"\nload average now {os.getloadavg()[0]:.2f}")
        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(load_session, path)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
