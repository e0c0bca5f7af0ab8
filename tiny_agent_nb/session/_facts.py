"""New facts: what the loop commits.

A `NewFact` is a payload plus an optional reserved id; `SessionStore.commit` gives it
its seq, timestamp and (unless reserved) id. A payload model is its own constructor
(`NewFact(AbortRequested(operationId=..., reason=...))`: the `type` of a record, of a
compaction and of a kernel notice is its default), and a new kind of fact needs nothing
here: `NewFact(OperationStarted(operationId=..., operationKind="rewind",
inputEntryId=None, rewindsOperationId=...))` is a rewind's start. The functions here
build what a model cannot say by itself (nested messages, a tool call's reserved result
id and replay key, an error's default), and the starts of the operations most callers
commit (run, resume, compaction).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast, get_args

from . import _records
from ._canonical import json_value_problem, replay_key
from ._exceptions import InvalidTransactionError
from ._ids import new_id
from ._models import (
    AssistantEntry,
    AssistantMessage,
    CompactionEntry,
    EntryFact,
    EntryPayload,
    Fact,
    KernelNotice,
    RecordFact,
    ToolCall,
    ToolMessage,
    ToolOutcome,
    ToolResultEntry,
    Usage,
    UsageFact,
    UserEntry,
    UserMessage,
)
from ._records import *  # noqa: F403 (every record payload, offered below)
from ._records import (
    AttemptError,
    AttemptErrorKind,
    AttemptFailed,
    OperationStarted,
    RecordPayload,
    ReplayPolicy,
    RunOptions,
    ToolIdentity,
    ToolStarted,
)

# What `from ..session import facts as f` offers: the constructors below, the entry
# payload that is its own, and every record payload (`f.NewFact(f.AbortRequested(...))`).
__all__ = [
    "CompactionEntry",
    "NewFact",
    "assistant_message",
    "attempt_failed",
    "compaction_started",
    "kernel_notice",
    "resume_started",
    "run_started",
    "tool_result",
    "tool_started",
    "usage",
    "user_message",
]
__all__ += _records.__all__


@dataclass(frozen=True, slots=True)
class NewFact:
    body: EntryPayload | RecordPayload | Usage
    id: str | None = None

    def build(self, *, seq: int, fact_id: str, at: int) -> Fact:
        # The payload is a validated model instance: pydantic does not validate its
        # fields again (it does rerun model-level `after` validators such as Usage's
        # one-target check); the envelope fields are checked here.
        body = self.body
        if isinstance(body, Usage):
            return UsageFact(kind="usage", seq=seq, id=fact_id, at=at, usage=body)
        if isinstance(body, _ENTRY_PAYLOADS):
            return EntryFact(kind="entry", seq=seq, id=fact_id, at=at, entry=body)
        # What is left is a record (mypy cannot narrow by a tuple made from the union).
        return RecordFact(
            kind="record", seq=seq, id=fact_id, at=at, record=cast(RecordPayload, body)
        )


# A tuple, not `A | B`: the union would be rebuilt on every call of this commit path.
_ENTRY_PAYLOADS: tuple[type[EntryPayload], ...] = get_args(EntryPayload)


# ---------------------------------------------------------------- entries


def user_message(content: str, *, user_cells: str | None = None, id: str | None = None) -> NewFact:
    """A prompt; `user_cells`, the user's cells it is sent with (docs/spec.md §6)."""
    message = UserMessage(role="user", content=content)
    return NewFact(UserEntry(type="message", message=message, userCells=user_cells), id)


def assistant_message(
    attempt_id: str,
    *,
    content: str | None,
    tool_calls: list[ToolCall] | tuple[ToolCall, ...] = (),
    reasoning: str | None = None,
    refusal: str | None = None,
    finish_reason: str | None = "stop",
    id: str | None = None,
) -> NewFact:
    message = AssistantMessage(
        role="assistant",
        content=content,
        reasoning=reasoning,
        refusal=refusal,
        toolCalls=tuple(tool_calls),
        finishReason=finish_reason,
    )
    return NewFact(AssistantEntry(type="message", attemptId=attempt_id, message=message), id)


def tool_result(
    *,
    tool_started_id: str,
    result_entry_id: str,
    tool_call_id: str,
    content: str,
    outcome: ToolOutcome,
    is_error: bool | None = None,
) -> NewFact:
    """The result entry of a toolStarted; its id is the intent's reserved resultEntryId.

    `is_error` defaults to True for every outcome but completed and replayed.
    """
    if is_error is None:
        is_error = outcome not in ("completed", "replayed")
    message = ToolMessage(role="tool", toolCallId=tool_call_id, content=content, isError=is_error)
    body = ToolResultEntry(
        type="message", toolStartedId=tool_started_id, outcome=outcome, message=message
    )
    return NewFact(body, result_entry_id)


def kernel_notice(kernel_opened_id: str, content: str, *, id: str | None = None) -> NewFact:
    """What the model is told about kernel `kernel_opened_id` (docs/spec.md §9)."""
    message = UserMessage(role="user", content=content)
    return NewFact(KernelNotice(kernelOpenedId=kernel_opened_id, message=message), id)


# ---------------------------------------------------------------- records


def run_started(
    operation_id: str,
    input_entry_id: str,
    options: RunOptions | None = None,
    *,
    cell_id: str | None = None,
) -> NewFact:
    return NewFact(
        OperationStarted(
            operationId=operation_id,
            operationKind="run",
            inputEntryId=input_entry_id,
            options=options,
            cellId=cell_id,
        )
    )


def resume_started(
    operation_id: str, resumes_operation_id: str, options: RunOptions | None = None
) -> NewFact:
    return NewFact(
        OperationStarted(
            operationId=operation_id,
            operationKind="resume",
            inputEntryId=None,
            resumesOperationId=resumes_operation_id,
            options=options,
        )
    )


def compaction_started(operation_id: str) -> NewFact:
    """An operation of its own that only compacts (`%agent compact`): no input entry."""
    return NewFact(
        OperationStarted(
            operationId=operation_id,
            operationKind="compaction",
            inputEntryId=None,
        )
    )


def attempt_failed(
    attempt_id: str,
    *,
    kind: AttemptErrorKind,
    message: str,
    retryable: bool,
    status: int | None = None,
) -> NewFact:
    error = AttemptError(kind=kind, message=message, status=status)
    return NewFact(AttemptFailed(attemptId=attempt_id, error=error, retryable=retryable))


def tool_started(
    operation_id: str,
    attempt_id: str,
    tool_call_id: str,
    *,
    tool: ToolIdentity,
    arguments: dict[str, Any],
    replay_policy: ReplayPolicy,
    environment_identity: str,
    id: str | None = None,
) -> NewFact:
    """The intent, with a freshly reserved resultEntryId and its replayKey.

    Arguments that replay_key cannot encode raise InvalidTransactionError here (the store
    checks every argument again when the intent is committed)."""
    try:
        key = replay_key(tool, arguments, environment_identity)
    except (ValueError, TypeError, RecursionError):  # NaN, a set, a lone surrogate, a cycle
        problem = json_value_problem(arguments) or "they cannot be encoded as JSON"
        raise InvalidTransactionError(f"toolStarted arguments: {problem}") from None
    body = ToolStarted(
        operationId=operation_id,
        attemptId=attempt_id,
        toolCallId=tool_call_id,
        tool=tool,
        arguments=arguments,
        replayPolicy=replay_policy,
        environmentIdentity=environment_identity,
        resultEntryId=new_id(),
        replayKey=key,
    )
    return NewFact(body, id if id is not None else new_id())


# ---------------------------------------------------------------- usage


def usage(
    *,
    attempt_id: str | None = None,
    tool_started_id: str | None = None,
    input_tokens: int = 0,
    output_tokens: int = 0,
    reasoning_tokens: int = 0,
    cached_input_tokens: int = 0,
    cost: float | None = None,
) -> NewFact:
    body = Usage(
        attemptId=attempt_id,
        toolStartedId=tool_started_id,
        inputTokens=input_tokens,
        outputTokens=output_tokens,
        reasoningTokens=reasoning_tokens,
        cachedInputTokens=cached_input_tokens,
        cost=cost,
    )
    return NewFact(body)
