"""The records of an operation's life (docs/session-format.md §4): how the reducer checks and
applies its start, its model attempts, its tool intents and its end, and the checks an
entry or a record makes of the operation and the attempt it names.

At most one operation is open at a time; an attempt is pending until an assistant
entry (or a compaction's summary) settles it or an attemptFailed ends it; every tool
call of a settled attempt has its intent and its result before the next attempt, and
an operation ends with none pending.
"""

from __future__ import annotations

from ._canonical import json_value_problem, replay_key
from ._models import EntryFact, KernelNotice, RecordFact, UserEntry
from ._records import (
    FileRestore,
    KernelOpened,
    OperationFinished,
    OperationStarted,
    StepAttempt,
    ToolStarted,
)
from ._tables import Attempt, Kernel, Operation, Restore, Tables, ToolIntent, Violation


def open_operation(t: Tables, op_id: str, what: str) -> Operation:
    op = t.operations.get(op_id)
    if op is None:
        raise Violation(f"{what} names unknown operation {op_id}")
    if op.status != "open":
        raise Violation(f"{what} references operation {op_id}, which is already {op.status}")
    return op


def pending_attempt(t: Tables, attempt_id: str, what: str) -> tuple[Attempt, Operation]:
    attempt = t.attempts.get(attempt_id)
    if attempt is None:
        raise Violation(f"{what} names unknown stepAttempt {attempt_id}")
    if attempt.status != "pending":
        raise Violation(
            f"{what} answers stepAttempt {attempt_id}, which is already {attempt.status}"
        )
    return attempt, open_operation(t, attempt.operation_id, what)


def _claim_fresh(t: Tables, new_id: str, role: str) -> None:
    if new_id in t.ids:
        raise Violation(f"{role} {new_id} is already used")


def check_arguments(arguments: object, whose: str) -> None:
    # The one free-form value of the format: checked here, on commit and on load alike,
    # so the store never writes a line its own reader refuses (docs/session-format.md §3.4).
    problem = json_value_problem(arguments)
    if problem is not None:
        raise Violation(f"{whose} arguments: {problem}")


def apply_operation_started(t: Tables, fact: RecordFact, body: OperationStarted) -> None:
    if t.open_operation_id is not None:
        raise Violation(
            f"runStarted while operation {t.open_operation_id} is still open "
            "(at most one operation is open at a time)"
        )
    _claim_fresh(t, body.operationId, "operationId")
    if body.inputEntryId is not None:
        entry = t.entries.get(body.inputEntryId)
        if entry is None or not isinstance(entry.entry, UserEntry):
            raise Violation(f"inputEntryId {body.inputEntryId} is no earlier user entry")
        if body.inputEntryId in t.consumed_inputs:
            raise Violation(
                f"user entry {body.inputEntryId} is already the input of operation "
                f"{t.consumed_inputs[body.inputEntryId]}"
            )
        t.put(t.consumed_inputs, body.inputEntryId, body.operationId)
    if body.resumesOperationId is not None:
        resumed = t.operations.get(body.resumesOperationId)
        if resumed is None:
            raise Violation(f"resumesOperationId {body.resumesOperationId} is no operation")
        if resumed.kind in ("compaction", "replay"):
            raise Violation(f"a resume continues a run; {resumed.id} is a {resumed.kind}")
        if resumed.status in ("open", "completed"):
            raise Violation(
                f"a resume continues an operation that did not complete; "
                f"{resumed.id} is {resumed.status}"
            )
    if body.replaysOperationId is not None:
        replayed = t.operations.get(body.replaysOperationId)
        if replayed is None or replayed.kind != "run":
            raise Violation(f"replaysOperationId {body.replaysOperationId} is no run")
    # A run's prompt is committed just before it: rewinding the run takes it back too.
    head_entry = t.head if body.inputEntryId is None else _parent(t, body.inputEntryId)
    head = (head_entry, t.head_operation, t.last_cut)
    if body.rewindsOperationId is not None:
        # No operation is open here (checked above): any earlier one may be named.
        target = t.operations.get(body.rewindsOperationId)
        if target is None:
            raise Violation(f"rewindsOperationId {body.rewindsOperationId} is no operation")
        # The conversation goes back to where it stood when the target started.
        t.head, t.head_operation, t.last_cut = (
            target.head_before,
            target.parent,
            target.cut_before,
        )
        t.detached = True
        t.rewound_at = fact.seq
    else:
        t.head_operation = body.operationId
    t.put(t.ids, body.operationId, "operation")
    t.put(
        t.operations,
        body.operationId,
        t.row(
            Operation,
            body,
            id=body.operationId,
            kind=body.operationKind,
            status="open",
            started_at=fact.at,
            head_before=head[0],
            parent=head[1],
            cut_before=head[2],
        ),
    )
    t.open_operation_id = body.operationId


def _parent(t: Tables, entry_id: str) -> str | None:
    """The entry before `entry_id` on the path: read from the newest (a run's prompt is
    one of the last)."""
    if entry_id in t.parents:
        return t.parents[entry_id]
    newer = reversed(t.entries)
    for found in newer:
        if found == entry_id:
            return next(newer, None)
    return None


def apply_step_attempt(t: Tables, fact: RecordFact, body: StepAttempt) -> None:
    op = open_operation(t, body.operationId, "stepAttempt")
    if op.kind in ("replay", "rewind"):
        raise Violation(f"operation {op.id} is a {op.kind}: it sends no model request")
    if op.pending_attempts:
        raise Violation(f"operation {op.id} already has a pending stepAttempt")
    if op.unanswered_tool_calls:
        raise Violation(
            f"operation {op.id} has {op.unanswered_tool_calls} tool call(s) without a result; "
            "every tool call needs a result before the next model attempt"
        )
    t.put(
        t.attempts,
        fact.id,
        Attempt(
            id=fact.id,
            operation_id=op.id,
            step=body.step,
            attempt=body.attempt,
            provider=t.share(body.provider),
            model=t.share(body.model),
            configuration_digest=t.share(body.configurationDigest),
            started_at=fact.at,
        ),
    )
    t.put(t.operations, op.id, op.counted(attempts=1))  # from none (checked above)


def apply_tool_started(t: Tables, fact: RecordFact, body: ToolStarted) -> None:
    op = open_operation(t, body.operationId, "toolStarted")
    attempt = t.attempts.get(body.attemptId)
    if attempt is None or attempt.status != "settled":
        raise Violation(f"toolStarted attemptId {body.attemptId} is no settled stepAttempt")
    # A replay runs again a call its run made and answered (docs/spec.md §12): the
    # call is another operation's, and already has its toolStarted.
    replay = op.kind == "replay"
    if attempt.operation_id != op.id and not replay:
        raise Violation(
            f"toolStarted belongs to operation {op.id} but its stepAttempt "
            f"{attempt.id} belongs to {attempt.operation_id}"
        )
    call_name = dict(attempt.tool_calls).get(body.toolCallId)
    if call_name is None:
        raise Violation(
            f"toolStarted toolCallId {body.toolCallId!r} is no tool call of the assistant "
            f"entry of stepAttempt {attempt.id}"
        )
    # A built-in tool runs under the name the model called. A tool from elsewhere
    # (`mcp:<server>`) is recorded under the server's own name for it, which the model
    # called with the server's prefix (`<server>__<tool>`, sanitized): not checked here.
    if body.tool.source == "builtin" and call_name != body.tool.name:
        raise Violation(
            f"toolStarted runs {body.tool.name!r}; the tool call asked for {call_name!r}"
        )
    call_key = (attempt.id, body.toolCallId)
    if call_key in t.intent_by_call and not replay:
        raise Violation(
            f"tool call {body.toolCallId!r} already has toolStarted {t.intent_by_call[call_key]}"
        )
    _claim_fresh(t, body.resultEntryId, "resultEntryId")
    check_arguments(body.arguments, "toolStarted")  # before replay_key encodes them
    expected_key = replay_key(body.tool, body.arguments, body.environmentIdentity)
    if body.replayKey != expected_key:
        raise Violation(
            f"replayKey {body.replayKey} does not match its tool, arguments and environment"
        )
    t.put(t.ids, body.resultEntryId, "reserved")
    if not replay:
        t.put(t.intent_by_call, call_key, fact.id)
    t.put(
        t.intents,
        fact.id,
        ToolIntent(
            id=fact.id,
            operation_id=op.id,
            attempt_id=attempt.id,
            tool_call_id=body.toolCallId,
            tool=t.share(body.tool),
            arguments=body.arguments,
            replay_policy=body.replayPolicy,
            environment_identity=t.share(body.environmentIdentity),
            replay_key=body.replayKey,
            result_entry_id=body.resultEntryId,
        ),
    )
    # A replay's call is unanswered until its result (its result counts it answered).
    t.put(t.operations, op.id, op.counted(intents=1, unanswered=int(replay)))


def apply_file_restore(t: Tables, fact: RecordFact, body: FileRestore) -> None:
    op = open_operation(t, body.operationId, "fileRestore")
    if op.kind != "rewind":
        raise Violation(f"fileRestore names operation {op.id}, which is a {op.kind}, not a rewind")
    restore = Restore(op.id, body.path, body.from_, body.fromMode, body.to, body.toMode)
    t.put(t.restores, fact.id, restore)


def apply_operation_finished(t: Tables, body: OperationFinished) -> None:
    op = open_operation(t, body.operationId, "operationFinished")
    if op.pending_attempts:
        raise Violation(f"operationFinished while operation {op.id} has a pending stepAttempt")
    if op.pending_intents:
        raise Violation(
            f"operationFinished while operation {op.id} has {op.pending_intents} "
            "toolStarted without a result"
        )
    t.put(t.operations, op.id, op._replace(status=body.outcome, detail=body.detail))
    t.open_operation_id = None


# A `kernelOpened` record refers to nothing and may come at any point, even while a run is
# open (the previous kernel died inside it). A `kernelNotice` entry names the latest
# `kernelOpened`, at most once, and never lands between a tool call and its result (a
# provider refuses a user message there). docs/spec.md §9.


def apply_kernel_opened(t: Tables, fact: RecordFact, body: KernelOpened) -> None:
    t.put(
        t.kernels,
        fact.id,
        t.row(
            Kernel,
            body,
            id=fact.id,
            opened_at=fact.at,
            entries_before=len(t.entries),
            intents_before=len(t.intents),
            operations_before=len(t.operations),
        ),
    )


def apply_kernel_notice(t: Tables, fact: EntryFact, body: KernelNotice) -> None:
    named = body.kernelOpenedId
    kernel = t.kernels.get(named)
    if kernel is None:
        raise Violation(f"kernelNotice names {named}, which is no kernelOpened record")
    latest = next(reversed(t.kernels))
    if named != latest:
        raise Violation(
            f"kernelNotice names kernelOpened {named}, not the latest kernel ({latest})"
        )
    if kernel.notice_id is not None:
        raise Violation(f"kernelOpened {named} already has its notice {kernel.notice_id}")
    op_id = t.open_operation_id
    if op_id is not None and t.operations[op_id].unanswered_tool_calls:
        raise Violation(
            f"kernelNotice while operation {op_id} has a tool call without a result "
            "(nothing may come between a tool call and its result)"
        )
    t.put(t.kernels, named, kernel._replace(notice_id=fact.id))
