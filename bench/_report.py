"""What the benchmark scripts share: one row of the results table."""

from __future__ import annotations

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
