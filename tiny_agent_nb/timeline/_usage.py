"""The usage ledger per run and for the session: tokens, and the cost with what makes it
unknown or a lower bound (`words.money` writes it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..session import SessionState, UsageTotals


def unreported_attempts(state: SessionState) -> dict[str, int]:
    """Per run (operation id): its settled attempts with no usage record. The provider
    answered and reported no usage (a stream without a usage chunk), so their tokens and
    cost are unknown: they are counted as unpriced, never as $0."""
    counts = dict.fromkeys(state.operations, 0)
    for a in state.attempts.values():
        if a.status == "settled" and a.id not in state.usage:
            counts[a.operation_id] += 1
    return counts


def priced(totals: UsageTotals, unreported: int = 0) -> tuple[float | None, int]:
    """(cost, unpriced) of a usage ledger, for `words.money`: the cost is None when
    nothing reported one although something was used, and `unpriced` counts the usage
    records without a cost and the settled attempts without a usage record."""
    unpriced = totals.unpriced + unreported
    if totals.priced:
        return round(totals.cost, 12), unpriced
    return (None if unpriced else 0.0), unpriced


def session_cost(state: SessionState) -> tuple[float | None, int]:
    """`priced` of the whole session (its usage ledger and every answered attempt that
    reported no usage): the cost `%agent status`, `%agent usage`, the report of an opened
    session and the CLI all say."""
    return priced(state.totals, sum(unreported_attempts(state).values()))


@dataclass(frozen=True)
class RunUsage:
    """The usage ledger of one run: every usage fact of its attempts and tool intents."""

    number: int  # 1-based, in file order
    operation_id: str
    kind: str
    status: str
    totals: UsageTotals
    unreported_attempts: int  # pending attempts with no usage: tokens and cost unknown
    unpriced_attempts: int  # answered (settled) attempts that reported no usage
    detail: str | None = None  # the run's detail (a budgetLimit's budget and spend)

    @property
    def cost(self) -> tuple[float | None, int]:
        return priced(self.totals, self.unpriced_attempts)


def usage_by_run(state: SessionState) -> list[RunUsage]:
    """Per-run sums of the usage ledger; together they are exactly `state.totals`."""
    totals = state.usage_by_operation()
    unreported: Counter[str] = Counter(
        a.operation_id
        for a in state.attempts.values()
        if a.status == "pending" and a.id not in state.usage
    )
    settled = unreported_attempts(state)
    return [
        RunUsage(
            n,
            op.id,
            op.kind,
            op.status,
            totals[op.id],
            unreported[op.id],
            settled[op.id],
            op.detail,
        )
        for n, op in enumerate(state.operations.values(), start=1)
    ]
