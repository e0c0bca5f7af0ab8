"""The planner (DESIGN §6): a pure function from what the file says to what to do next.

`load()` only reconstructs; this module decides, and the loop executes and commits:
- a `safeRead` intent without result whose replayKey, recomputed for the current tool
  identity and workspace, equals the recorded one → replay it (`outcome: replayed`);
- any other intent without result → one synthetic `interrupted` result: the effect may
  have happened, the result is unknown, it is never re-run;
- an attempt without settled entry → `attemptFailed{kind: interrupted}`;
- the open operation → `operationFinished{outcome: interrupted}`.
The same rules with `aborted` serve an interrupt (Ctrl-C) inside a running operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

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

INTERRUPTED_RESULT = (
    "Interrupted: the process stopped after this tool started. Its effect may or may not "
    "have happened; the result is unknown. It was not run again."
)
ABORTED_RESULT = (
    "Interrupted by the user while running. Its effect may be partial; the result is unknown."
)


@dataclass(frozen=True)
class Recovery:
    """What to do with the open operation a dead process left behind."""

    operation: Operation
    replay: tuple[ToolIntent, ...]  # safeRead intents to run again, in file order
    interrupt: tuple[ToolIntent, ...]  # intents that get a synthetic interrupted result
    fail: tuple[Attempt, ...]  # attempts that never settled

    def closing_transaction(self) -> list[NewFact]:
        """Everything but the replays, committed as one transaction after them."""
        return [
            *(intent_result(i, INTERRUPTED_RESULT, "interrupted") for i in self.interrupt),
            *(
                f.attempt_failed(
                    a.id,
                    kind="interrupted",
                    message="the process stopped while this request was in flight",
                    retryable=False,
                )
                for a in self.fail
            ),
            f.operation_finished(self.operation.id, "interrupted"),
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
    return Recovery(
        operation=op,
        replay=replay,
        interrupt=tuple(i for i in pending if i not in replay),
        fail=tuple(
            a for a in state.attempts.values() if a.operation_id == op.id and a.status == "pending"
        ),
    )


def abort_transaction(state: SessionState, operation_id: str, reason: str) -> list[NewFact]:
    """Ctrl-C inside a run: everything in flight resolved, the operation aborted."""
    op = state.operations.get(operation_id)
    if op is None or op.status != "open":
        return []
    return [
        f.abort_requested(operation_id, reason),
        *(
            f.attempt_failed(a.id, kind="aborted", message=reason, retryable=False)
            for a in state.attempts.values()
            if a.operation_id == operation_id and a.status == "pending"
        ),
        *(
            intent_result(i, ABORTED_RESULT, "interrupted")
            for i in state.tool_intents.values()
            if i.operation_id == operation_id and i.status == "pending"
        ),
        f.operation_finished(operation_id, "aborted", detail=reason),
    ]


ResumeBlocker = Literal["open", "nothing", "completed"]


def resumable_operation(state: SessionState) -> Operation | ResumeBlocker:
    """The operation `%agent resume` continues: the latest, if it was interrupted or aborted."""
    if state.open_operation is not None:
        return "open"
    if not state.operations:
        return "nothing"
    latest = list(state.operations.values())[-1]
    if latest.status in ("interrupted", "aborted"):
        return latest
    return "completed"


def intent_result(
    intent: ToolIntent,
    content: str,
    outcome: Literal["interrupted", "replayed"],
    *,
    is_error: bool | None = None,
) -> NewFact:
    """The result entry answering a recorded intent (a synthetic or a replayed one)."""
    return f.tool_result(
        tool_started_id=intent.id,
        result_entry_id=intent.result_entry_id,
        tool_call_id=intent.tool_call_id,
        content=content,
        outcome=outcome,
        is_error=is_error,
    )
