"""The usage totals of a state (docs/spec.md §4: a count or cost past MAX_REPORTED reads
as no usage)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ._models import Usage
from ._records import MAX_REPORTED


@dataclass(slots=True)
class UsageTotals:
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    cost: float = 0.0
    priced: int = 0  # usage facts that reported a cost
    unpriced: int = 0  # usage facts whose cost is unknown (null)

    def add(self, u: Usage) -> None:
        if not usage_in_range(u):
            return  # no usage, as far as any sum is concerned (docs/spec.md §4)
        self.input_tokens += u.inputTokens
        self.output_tokens += u.outputTokens
        self.reasoning_tokens += u.reasoningTokens
        self.cached_input_tokens += u.cachedInputTokens
        if u.cost is None:
            self.unpriced += 1
        else:
            self.cost += u.cost
            self.priced += 1

    def copy(self) -> UsageTotals:
        return replace(self)

    @property
    def known_cost(self) -> float | None:
        """Sum of reported costs; None when usage exists but no provider reported a cost."""
        if self.priced:
            return round(self.cost, 12)
        return None if self.unpriced else 0

    def summary(self) -> dict[str, Any]:
        return {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "reasoningTokens": self.reasoning_tokens,
            "cachedInputTokens": self.cached_input_tokens,
            "cost": self.known_cost,
        }


def usage_in_range(u: Usage) -> bool:
    """Whether every count and the cost of `u` is at most MAX_REPORTED: a usage fact past
    it is kept in the file but read as no usage (docs/spec.md §4)."""
    counts = (u.inputTokens, u.outputTokens, u.reasoningTokens, u.cachedInputTokens)
    return max(counts) <= MAX_REPORTED and (u.cost is None or u.cost <= MAX_REPORTED)
