"""The usage ledger of a state: a usage fact kept as a row of atoms, and its totals
(docs/spec.md §4: a count or cost past MAX_REPORTED reads as no usage)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ._models import Usage
from ._records import MAX_REPORTED

# perf: register row "usage-rows" (docs/benchmarks.md)
# A usage fact's body as a tuple of atoms (which the cyclic GC stops tracking), not a
# pydantic Usage (three tracked objects): attemptId, toolStartedId, inputTokens,
# outputTokens, reasoningTokens, cachedInputTokens, cost. `usage_of` makes the Usage back.
UsageRow = tuple[str | None, str | None, int, int, int, int, float | None]


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


USAGE_FIELDS = (
    "attemptId",
    "toolStartedId",
    "inputTokens",
    "outputTokens",
    "reasoningTokens",
    "cachedInputTokens",
    "cost",
)
# The fields a usage line holds: its one target, the counts and the cost (maybe null).
_FIELDS_SET = (frozenset(USAGE_FIELDS[1:]), frozenset(USAGE_FIELDS[:1] + USAGE_FIELDS[2:]))
_new_usage = Usage.__new__
_set = object.__setattr__
# What `usage_of` leaves out of `model_construct` must not exist for Usage.
assert not Usage.__pydantic_post_init__ and not Usage.__private_attributes__
assert tuple(Usage.model_fields) == USAGE_FIELDS


def usage_in_range(u: Usage) -> bool:
    """Whether every count and the cost of `u` is at most MAX_REPORTED: a usage fact past
    it is kept in the file but read as no usage (docs/spec.md §4)."""
    counts = (u.inputTokens, u.outputTokens, u.reasoningTokens, u.cachedInputTokens)
    return max(counts) <= MAX_REPORTED and (u.cost is None or u.cost <= MAX_REPORTED)


def row_in_range(row: UsageRow) -> bool:
    """`usage_in_range` of a usage row, without making its Usage."""
    _, _, i, o, r, c, cost = row
    m = MAX_REPORTED
    return i <= m and o <= m and r <= m and c <= m and (cost is None or cost <= m)


def usage_row(u: Usage) -> UsageRow:
    return (
        u.attemptId,
        u.toolStartedId,
        u.inputTokens,
        u.outputTokens,
        u.reasoningTokens,
        u.cachedInputTokens,
        u.cost,
    )


def usage_of(row: UsageRow) -> Usage:
    """The Usage of a row made from a validated one: what `model_construct` makes (its
    fields, the fields its line held, no extra, no private) without its Python loop."""
    usage = _new_usage(Usage)
    _set(usage, "__dict__", dict(zip(USAGE_FIELDS, row, strict=True)))
    _set(usage, "__pydantic_fields_set__", set(_FIELDS_SET[row[0] is not None]))
    _set(usage, "__pydantic_extra__", None)
    _set(usage, "__pydantic_private__", None)
    return usage
