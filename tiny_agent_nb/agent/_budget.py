"""The run budget (docs/spec.md §4): what a prompt's run has spent, from the file's ledger.

A run's spend is the usage of its **chain**: the operation, every operation it resumes
back to the `run` that accepted the prompt, and the compactions after any of them. So a
resumed run keeps counting where it was (the ledger is on disk, not in memory).

Unknown cost is never taken as zero: a settled attempt with no usage, or usage whose
cost is null, is counted apart, and said once: the budget stops only on what was priced.
A failed attempt's usage counts like a settled one's (a broken stream was billed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..session import (
    AssistantEntry,
    CompactionEntry,
    Fact,
    OperationStarted,
    RecordFact,
    SessionState,
    SessionStore,
    StepAttempt,
    ToolStarted,
    UsageFact,
    usage_in_range,
)
from ..words import usd  # the one money format (docs/glossary.md)
from ._types import BudgetReached


@dataclass(frozen=True)
class Spend:
    cost: float  # USD, the sum of reported costs
    unknown: int  # attempts and tools whose cost is unknown (no usage, or cost null)
    operations: int  # operations in the chain (1 for a run never resumed)


def run_chain(state: SessionState, operation_id: str) -> list[str]:
    """`operation_id`, the operations it resumes, newest first, then the compactions that
    followed any of them."""
    chain: list[str] = []
    current: str | None = operation_id
    while current is not None and current not in chain:
        chain.append(current)
        op = state.operations.get(current)
        current = op.resumes_operation_id if op is not None else None
    members, after = set(chain), None
    for op in state.operations.values():
        if op.kind != "compaction":
            after = op.id
        elif after in members:
            chain.append(op.id)
    return chain


def chain_spend(state: SessionState, operation_id: str) -> Spend:
    chain = run_chain(state, operation_id)
    cost, unknown = _ledger_sum(state, set(chain))
    return Spend(round(cost, 12), unknown, len(chain))


def _ledger_sum(state: SessionState, chain: set[str]) -> tuple[float, int]:
    """(reported cost, count of unknown costs) of the operations in `chain`."""
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
    return cost, unknown


# perf: register row "budget-follow" (docs/benchmarks.md)
class Spending:
    """`chain_spend` of the run being driven, kept from its facts as they commit, so a
    check costs O(1) whatever the history. The operations it resumes are closed: their
    spend is read once. Asked about an operation it did not see start, it reads the ledger.
    """

    def __init__(self, store: SessionStore, *, follow: bool) -> None:
        self._store = store
        self._unsubscribe: Callable[[], None] = (
            store.subscribe(self._observe) if follow else lambda: None
        )
        self._operation_id: str | None = None
        self._resumes: str | None = None
        self._before: Spend | None = None  # the resumed operations', read on first use
        self._cost, self._unknown = 0.0, 0
        self._targets: set[str] = set()  # the open operation's attempts and tool intents
        self._priced: set[str] = set()  # ... that have usage
        self._settled_unpriced: set[str] = set()  # settled attempts without usage (unknown)

    def close(self) -> None:
        self._unsubscribe()

    def of(self, operation_id: str) -> Spend:
        if operation_id != self._operation_id:
            return chain_spend(self._store.load(), operation_id)
        before = self._before
        if before is None:
            before = Spend(0.0, 0, 0)
            if self._resumes is not None:
                state = self._store.load()
                chain = run_chain(state, self._resumes)
                before = Spend(*_ledger_sum(state, set(chain)), len(chain))
            self._before = before
        cost, unknown = before.cost + self._cost, before.unknown + self._unknown
        return Spend(round(cost, 12), unknown, before.operations + 1)

    def _observe(self, facts: Sequence[Fact]) -> None:
        for fact in facts:
            if isinstance(fact, UsageFact):
                target = fact.usage.target_id
                # Out of range reads as no usage, as in `state.usage` (docs/spec.md §4).
                if target in self._targets and usage_in_range(fact.usage):
                    self._priced.add(target)
                    if target in self._settled_unpriced:
                        self._settled_unpriced.discard(target)
                        self._unknown -= 1
                    if fact.usage.cost is None:
                        self._unknown += 1
                    else:
                        self._cost += fact.usage.cost
            elif isinstance(fact, RecordFact):
                record = fact.record
                if isinstance(record, OperationStarted):
                    self._start(record)
                elif (
                    isinstance(record, StepAttempt | ToolStarted)
                    and record.operationId == self._operation_id
                ):
                    self._targets.add(fact.id)
            elif isinstance(fact.entry, AssistantEntry | CompactionEntry):
                attempt_id = fact.entry.attemptId
                if attempt_id in self._targets and attempt_id not in self._priced:
                    self._settled_unpriced.add(attempt_id)
                    self._unknown += 1

    def _start(self, record: OperationStarted) -> None:
        self._operation_id, self._resumes = record.operationId, record.resumesOperationId
        self._before = None
        self._cost, self._unknown = 0.0, 0
        self._targets, self._priced, self._settled_unpriced = set(), set(), set()


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
