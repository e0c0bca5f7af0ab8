"""The run budget (docs/spec.md §4): a stop when a run's chain has spent it.

What a chain spent is the session's (`SessionState.spend`, kept by the reducer), so a
resumed run keeps counting where it was. Unknown cost is never taken as zero: it is
counted apart, and said once: the budget stops only on what was priced.
"""

from __future__ import annotations

from ..session import Spend
from ..words import usd  # the one money format (docs/glossary.md)
from ._types import BudgetReached


def budget_reached(spend: Spend, budget: float, *, not_run: int = 0) -> BudgetReached | None:
    """The reason to stop when `spend` is at or past `budget`, else None."""
    if spend.cost < budget:
        return None
    return BudgetReached(budget, spend.cost, spend.unknown, spend.operations, not_run)


def unknown_cost_note(budget: float) -> str:
    return (
        f"cost unknown for some of this run's requests (the server did not report it): "
        f"the budget of {usd(budget)} counts only priced usage, so this run may spend more"
    )
