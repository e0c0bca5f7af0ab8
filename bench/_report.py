"""What the benchmark scripts share: a result row, GC accounting, what was measured."""

from __future__ import annotations

import gc
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import tiny_agent_nb


@dataclass
class Row:
    metric: str
    ours: str
    raw: str
    ratio: float | None
    target: float | None

    def verdict(self) -> str:
        if self.ratio is None or self.target is None:
            return "info"
        return "PASS" if self.ratio <= self.target else "FAIL"


def spread(values: Sequence[float], unit: Callable[[float], str]) -> str:
    """min / median / max: the noise of a repeated measurement, made visible."""
    return " / ".join(unit(v) for v in (min(values), statistics.median(values), max(values)))


def print_rows(rows: Sequence[Row]) -> None:
    print("| metric | tiny-agent-nb | raw baseline | ratio | target | result |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        ratio = "—" if r.ratio is None else f"{r.ratio:.2f}x"
        target = "—" if r.target is None else f"≤ {r.target:g}"
        print(f"| {r.metric} | {r.ours} | {r.raw} | {ratio} | {target} | {r.verdict()} |")


def print_spreads(spreads: Sequence[tuple[str, str, str]]) -> None:
    print("Every repeated run (min / median / max):")
    print()
    print("| measurement | tiny-agent-nb | raw baseline |")
    print("|---|---|---|")
    for name, ours, raw in spreads:
        print(f"| {name} | {ours} | {raw} |")


def settle() -> None:
    """Start every timed section from the same heap: no garbage left by the last one."""
    gc.collect()


class GcClock:
    """Wall time spent in the cyclic garbage collector while it is entered.

    cProfile charges a collection to whatever call happened to allocate, so this is
    the only honest way to say how much of a run was GC.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._since = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._since = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._since

    def __enter__(self) -> GcClock:
        settle()
        self.seconds = 0.0
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self)


def revision() -> str:
    """The git commit measured, and whether the work tree differed from it."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], check=False, cwd=root, capture_output=True)
        return done.stdout.decode(errors="replace").strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "tiny_agent_nb")
    except OSError:
        return "(no git)"
    if not head:
        return "(not a git checkout)"
    package = Path(tiny_agent_nb.__file__).resolve().parent
    if package != root / "tiny_agent_nb":
        return f"(checkout at {head}; tiny_agent_nb imported from {package})"
    return f"{head}{' + uncommitted changes in tiny_agent_nb/' if dirty else ''}"


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
