"""The run budget (docs/spec.md §11): what a prompt's run has spent, from the file's ledger.

A run's spend is the usage of the attempts and tools of its **chain**: the operation
and every operation it resumes, back to the `run` that accepted the prompt. So a run
stopped by a crash, an abort or its budget keeps counting where it was when it is
resumed (the ledger is on disk; nothing is held in memory across kernels).

Unknown cost is never taken as zero: a settled attempt with no usage, or usage whose
cost is null, is counted apart. The budget can only stop on what was priced, so a run
with unknown costs keeps going and says once that the budget covers only priced usage
(a server that never reports cost would otherwise stop every run, or none, wrongly).

The check reads the whole ledger (O(history): register row "budget-scan" in
docs/benchmarks.md), and only when a budget is set: it runs once per attempt, beside a
model request.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..render import usd  # the one money format (docs/glossary.md)
from ..session import SessionState


@dataclass(frozen=True)
class Spend:
    cost: float  # USD, the sum of reported costs
    unknown: int  # attempts and tools whose cost is unknown (no usage, or cost null)
    operations: int  # operations in the chain (1 for a run never resumed)


def run_chain(state: SessionState, operation_id: str) -> list[str]:
    """`operation_id` and the operations it resumes, newest first."""
    chain: list[str] = []
    current: str | None = operation_id
    while current is not None and current not in chain:
        chain.append(current)
        op = state.operations.get(current)
        current = op.resumes_operation_id if op is not None else None
    return chain


def chain_spend(state: SessionState, operation_id: str) -> Spend:
    chain = set(run_chain(state, operation_id))
    cost, unknown = 0.0, 0
    usage = state.usage
    for attempt in state.attempts.values():
        if attempt.operation_id not in chain:
            continue
        u = usage.get(attempt.id)
        if u is None:
            # A failed attempt without usage was not billed as far as anyone reported
            # (an HTTP error, a refused connection); a settled one was, at a price unknown.
            unknown += attempt.status == "settled"
        elif u.cost is None:
            unknown += 1
        else:
            cost += u.cost
    for intent in state.tool_intents.values():
        if intent.operation_id in chain and (u := usage.get(intent.id)) is not None:
            if u.cost is None:
                unknown += 1
            else:
                cost += u.cost
    return Spend(round(cost, 12), unknown, len(chain))


def budget_reached(spend: Spend, budget: float) -> str | None:
    """The run's detail when `spend` is at or past `budget`, else None."""
    if spend.cost < budget:
        return None
    whose = "this run" if spend.operations == 1 else f"this run ({spend.operations} operations)"
    return (
        f"budget {usd(budget)} reached: {whose} spent {usd(spend.cost)}"
        + (f", plus {spend.unknown} of unknown cost" if spend.unknown else "")
        + ". Raise TinyAgent.budget and `%agent resume` to go on"
    )


def unknown_cost_note(spend: Spend, budget: float) -> str:
    """Said once per run when some of its cost is unknown."""
    return (
        f"cost unknown for some of this run's requests (the server did not report it): "
        f"the budget of {usd(budget)} counts only priced usage, so this run may spend more"
    )
