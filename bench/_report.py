"""What the benchmark scripts share: a row of the results table, GC accounting."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass


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
