"""Benchmark the start of the guard in front of every stdio MCP server.

    python bench/bench_mcp_guard.py [--runs 31] [--quick]

What is measured: `true` started under the guard (tiny_agent_nb/_guard.py, through
`guard_argv`, as the MCP package starts a server) until it ends: the guard's own start,
its spawn of the command, and its exit after the command's. Time is the CPU time of the
processes waited for (`RUSAGE_CHILDREN`: the guard and `true`), which other work on the
machine hardly moves, and their wall time.

Raw baseline, measured in the same run: the cheapest Python that does the same, the
interpreter started as the guard is (`-I -S`) spawning `true` and waiting for it. The
ratio is guard / baseline: what the guard adds (its imports, threading and ctypes the
largest, its signal handling, its watch thread) on top of the interpreter it cannot do
without: 2.4x (36 ms against 15 ms of CPU at load 10); the target, ≤ 3, is missed by the
guard with `site` (without `-S`: the `.pth` files of the environment, 4.8x), shown for
reference (info). Runs are interleaved (guard, baseline, with site,
guard, ...) and the median of each is shown, with min / median / max below.

It is a report, not a test: missing a target still exits 0. tests/test_mcp_guard.py
checks what the guard imports (`test_the_guard_imports_only_the_standard_library_it_uses`),
tests/test_bench_mcp_guard.py that this script runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from _report import Row, now, print_rows, print_spreads, revision, spread

from tiny_agent_nb._guard import guard_argv

TARGET = 3.0
BASELINE = "import os; os.waitpid(os.posix_spawnp('true', ['true'], os.environ), 0)"


def commands() -> dict[str, list[str]]:
    executable, argv = guard_argv("true", [])
    return {
        "guard": [executable, *argv],
        "baseline": [sys.executable, "-I", "-S", "-c", BASELINE],
        "with site": [executable, *(a for a in argv if a != "-S")],
    }


def run(command: list[str]) -> tuple[float, float]:
    """(CPU, wall) seconds of `command` and everything it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, stdin=subprocess.DEVNULL, check=True, timeout=60)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return cpu, wall


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--quick", action="store_true", help="5 runs")
    args = parser.parse_args(argv)
    runs = 5 if args.quick else args.runs
    named = commands()
    cpu: dict[str, list[float]] = {name: [] for name in named}
    wall: dict[str, list[float]] = {name: [] for name in named}
    for _ in range(runs):
        for name, command in named.items():
            c, w = run(command)
            cpu[name].append(c)
            wall[name].append(w)
    median = {name: statistics.median(values) for name, values in cpu.items()}
    median_wall = {name: statistics.median(values) for name, values in wall.items()}
    load = os.getloadavg()[0]
    print(f"# the MCP guard's start, {now()}, {revision()}")
    print(f"Python {platform.python_version()}, {runs} runs each, load {load:.1f}")
    print()
    base = median["baseline"]
    print_rows(
        [
            Row(
                "guarded `true`, CPU", ms(median["guard"]), ms(base), median["guard"] / base, TARGET
            ),
            Row(
                "guarded `true`, wall",
                ms(median_wall["guard"]),
                ms(median_wall["baseline"]),
                median_wall["guard"] / median_wall["baseline"],
                None,
            ),
            Row(
                "guarded `true` with `site`, CPU (info)",
                ms(median["with site"]),
                ms(base),
                median["with site"] / base,
                None,
            ),
        ]
    )
    print()
    print_spreads(
        [
            (f"{name}, {kind}", spread(values[name], ms), spread(values["baseline"], ms))
            for kind, values in (("CPU", cpu), ("wall", wall))
            for name in ("guard", "with site")
        ]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
