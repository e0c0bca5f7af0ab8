"""The planner (docs/spec.md §2): a pure function from what the file says to what to do next.

`load()` only reconstructs; this module decides, and the loop executes and commits:
- a `safeRead` intent without result whose replayKey, recomputed now, equals the
  recorded one → replay it; one that times out, fails or is interrupted gets an
  `interrupted` result instead;
- any other intent without result → a synthetic `interrupted` result, never re-run;
- an attempt without settled entry → `attemptFailed{kind: interrupted}`;
- the open operation → `operationFinished{outcome: interrupted}`, but `completed` for a
  `compaction` whose entry was committed (it did all it was for).
The same rules serve Ctrl-C inside a run (`abort_settlement`) and an unexpected error
inside one (`failure_settlement`), committed with the operation's end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..session import (
    Attempt,
    NewFact,
    Operation,
    SessionState,
    ToolIdentity,
    ToolIntent,
    replay_key,
)
from ..session import facts as f

if TYPE_CHECKING:
    from ..provider import ProviderError, UsageReport

INTERRUPTED_RESULT = (
    "Interrupted: the process stopped after this tool started. Its effect may or may not "
    "have happened; the result is unknown. It was not run again."
)
ABORTED_RESULT = (
    "Interrupted by the user while running. Its effect may be partial; the result is unknown."
)
FAILED_RESULT = (
    "Interrupted: the run stopped on an unexpected error while this tool was in flight. Its "
    "effect may or may not have happened; the result is unknown. It was not run again."
)
REPLAY_TIMED_OUT_RESULT = (
    "Interrupted: the process stopped after this read started, and reading again after the "
    "restart hit the tool's time limit. The result is unknown."
)
REPLAY_FAILED_RESULT = (
    "Interrupted: the process stopped after this read started, and reading again after the "
    "restart failed unexpectedly. The result is unknown."
)
REPLAY_SKIPPED_RESULT = (
    "Interrupted: the process stopped after this read started, and reading it again after "
    "the restart was skipped: the reads before it used up the time recovery may take. The "
    "result is unknown."
)
REPLAY_CANCELLED_RESULT = (
    "Interrupted: the process stopped after this read started, and the user interrupted "
    "reading it again after the restart. The result is unknown."
)
COMPACTION_COMMITTED = "the compaction was committed before the process stopped"


@dataclass(frozen=True)
class Recovery:
    """What to do with the open operation a dead process left behind."""

    operation: Operation
    replay: tuple[ToolIntent, ...]  # safeRead intents to run again, in file order
    interrupt: tuple[ToolIntent, ...]  # intents that get a synthetic interrupted result
    fail: tuple[Attempt, ...]  # attempts that never settled
    outcome: Literal["interrupted", "completed"] = "interrupted"

    def closing_transaction(
        self, cancelled: Sequence[ToolIntent] = (), skipped: Sequence[ToolIntent] = ()
    ) -> list[NewFact]:
        """Everything but the replays, one transaction after them; `cancelled`: replays
        the user interrupted, `skipped`: replays recovery had no time left for."""
        return [
            *(intent_result(i, INTERRUPTED_RESULT, "interrupted") for i in self.interrupt),
            *(intent_result(i, REPLAY_CANCELLED_RESULT, "interrupted") for i in cancelled),
            *(intent_result(i, REPLAY_SKIPPED_RESULT, "interrupted") for i in skipped),
            *(
                f.attempt_failed(
                    a.id,
                    kind="interrupted",
                    message="the process stopped while this request was in flight",
                    retryable=False,
                )
                for a in self.fail
            ),
            f.NewFact(
                f.OperationFinished(
                    operationId=self.operation.id,
                    outcome=self.outcome,
                    detail=COMPACTION_COMMITTED if self.outcome == "completed" else None,
                )
            ),
        ]


def can_replay(intent: ToolIntent, tools: Mapping[str, ToolIdentity], environment: str) -> bool:
    """True when re-running `intent` now is the same read it was then."""
    if intent.replay_policy != "safeRead":
        return False
    current = tools.get(intent.tool.name)
    if current is None:
        return False
    key = replay_key(current, intent.arguments, environment)
    return key == intent.replay_key


def plan_recovery(
    state: SessionState, tools: Mapping[str, ToolIdentity], environment: str
) -> Recovery | None:
    """The recovery of the open operation, or None when nothing is open."""
    op = state.open_operation
    if op is None:
        return None
    pending = [
        i for i in state.tool_intents.values() if i.operation_id == op.id and i.status == "pending"
    ]
    replay = tuple(i for i in pending if can_replay(i, tools, environment))
    attempts = [a for a in state.attempts.values() if a.operation_id == op.id]
    # A compaction operation has one job: once an attempt of it settled (with the
    # compaction entry, the only entry such an attempt can settle with) it is done.
    compacted = op.kind == "compaction" and any(a.status == "settled" for a in attempts)
    return Recovery(
        operation=op,
        replay=replay,
        interrupt=tuple(i for i in pending if i not in replay),
        fail=tuple(a for a in attempts if a.status == "pending"),
        outcome="completed" if compacted else "interrupted",
    )


def abort_settlement(state: SessionState, operation_id: str, reason: str) -> list[NewFact] | None:
    """Ctrl-C inside a run: `abortRequested` and everything in flight settled; None when
    the operation is not open."""
    settled = _settle_in_flight(state, operation_id, "aborted", reason, ABORTED_RESULT)
    return (
        None
        if settled is None
        else [f.NewFact(f.AbortRequested(operationId=operation_id, reason=reason)), *settled]
    )


def failure_settlement(state: SessionState, operation_id: str, reason: str) -> list[NewFact] | None:
    """An unexpected error inside a run: the same settling as an abort's."""
    return _settle_in_flight(state, operation_id, "interrupted", reason, FAILED_RESULT)


def _settle_in_flight(
    state: SessionState,
    operation_id: str,
    kind: Literal["aborted", "interrupted"],
    reason: str,
    result: str,
) -> list[NewFact] | None:
    """The operation's pending attempts failed and intents interrupted; None when it is
    not open."""
    op = state.operations.get(operation_id)
    if op is None or op.status != "open":
        return None
    return [
        *(
            f.attempt_failed(a.id, kind=kind, message=reason, retryable=False)
            for a in state.attempts.values()
            if a.operation_id == operation_id and a.status == "pending"
        ),
        *(
            intent_result(i, result, "interrupted")
            for i in state.tool_intents.values()
            if i.operation_id == operation_id and i.status == "pending"
        ),
    ]


ResumeBlocker = Literal["open", "nothing", "completed"]
# How a run may end and still be continued by `%agent resume` (docs/spec.md §2.3): stopped
# by the process, by the user, by its budget (raised since) or by max_steps (a resume gets
# max_steps more). A `failed` run is not: the file allows it (docs/session-format.md §4,
# rule 10), but a run failed by a refused request or a bug would only fail again the same
# way.
RESUMABLE = frozenset({"interrupted", "aborted", "budgetLimit", "stepLimit"})


def resumable_operation(state: SessionState) -> Operation | ResumeBlocker:
    """The operation `%agent resume` continues: the latest run (or resume) on the
    conversation's path (docs/spec.md §17: not one a rewind left behind), if it ended in
    one of RESUMABLE's ways. Compactions and replayed runs (docs/spec.md §12) are passed
    over: they continue no prompt."""
    if state.open_operation is not None:
        return "open"
    return resumable_run(state.operation_path())


def resumable_run(operations: Sequence[Operation]) -> Operation | ResumeBlocker:
    """`resumable_operation` of the operations on a session's path in file order, for a
    caller that holds no copy of its state."""
    if operations and operations[-1].status == "open":
        return "open"
    latest = next(
        (op for op in reversed(operations) if op.kind not in ("compaction", "replay")),
        None,
    )
    if latest is None:
        return "nothing"
    if latest.status in RESUMABLE:
        return latest
    return "completed"


def intent_result(intent: ToolIntent, content: str, outcome: Literal["interrupted"]) -> NewFact:
    """The synthetic result entry answering a recorded intent."""
    return f.tool_result(
        tool_started_id=intent.id,
        result_entry_id=intent.result_entry_id,
        tool_call_id=intent.tool_call_id,
        content=content,
        outcome=outcome,
    )


def attempt_usage(attempt_id: str, report: UsageReport | None) -> list[NewFact]:
    """The usage fact of an attempt; none when the server reported nothing (unknown)."""
    if report is None:
        return []
    return [
        f.usage(
            attempt_id=attempt_id,
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            reasoning_tokens=report.reasoning_tokens,
            cached_input_tokens=report.cached_input_tokens,
            cost=report.cost,
        )
    ]


def attempt_failure(attempt_id: str, error: ProviderError, message: str) -> list[NewFact]:
    """An attempt's `attemptFailed` (its message as it may be kept), with the usage the
    server reported before the answer failed: it was billed."""
    failed = f.attempt_failed(
        attempt_id,
        kind=error.kind,
        message=message,
        retryable=error.retryable,
        status=error.status,
    )
    return [failed, *attempt_usage(attempt_id, error.usage)]
