"""The pure reduction: one fact at a time, every invariant of docs/spec.md §5.

`apply_fact` checks a fact against the tables and then records it there (each check
reads only what the fact references, so its cost is independent of history). On load
it writes straight into the session's tables (a violation aborts the whole load). On
commit the tables log every write (`Tables.put`), so the store rolls the transaction
back exactly when a later fact is refused or the write fails: a refused commit changes
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._canonical import json_value_problem, replay_key
from ._kernels import apply_kernel_notice, apply_kernel_opened
from ._models import (
    AbortRequested,
    AssistantEntry,
    AttemptFailed,
    CompactionEntry,
    ContextWindow,
    EntryFact,
    Fact,
    KernelNotice,
    KernelOpened,
    OperationFinished,
    RecordFact,
    RunStarted,
    StepAttempt,
    SystemPrompt,
    ToolResultEntry,
    ToolStarted,
    UsageFact,
    UserEntry,
)
from ._tables import (
    Attempt,
    EntryType,
    LearnedWindow,
    Operation,
    Tables,
    ToolIntent,
    Violation,
    usage_row,
)


def apply_transaction(tables: Tables, facts: Sequence[Fact]) -> None:
    for index, fact in enumerate(facts):
        try:
            apply_fact(tables, fact, index)
        except Violation as exc:
            exc.args = (f"fact {index + 1} (seq {fact.seq}): {exc.args[0]}",)
            raise


def apply_fact(t: Tables, fact: Fact, position: int) -> None:
    """Check and record `fact`, the `position`-th fact of the transaction whose line will
    be `t.lines[len(t.lines)]` (the caller appends the line once all its facts apply)."""
    if fact.seq != t.last_seq + 1:
        raise Violation(f"seq {fact.seq} should be {t.last_seq + 1}")
    if isinstance(fact, EntryFact):
        _apply_entry(t, fact, position)
    elif isinstance(fact, RecordFact):
        _apply_record(t, fact, position)
    else:
        _apply_usage(t, fact)
    t.last_seq = fact.seq


def _claim_fact_id(t: Tables, fact_id: str) -> None:
    if fact_id in t.ids:
        raise Violation(f"id {fact_id} is already used")
    t.put(t.ids, fact_id, "fact")


def _claim_fresh(t: Tables, new_id: str, role: str) -> None:
    if new_id in t.ids:
        raise Violation(f"{role} {new_id} is already used")


def _open_operation(t: Tables, op_id: str, what: str) -> Operation:
    op = t.operations.get(op_id)
    if op is None:
        raise Violation(f"{what} names unknown operation {op_id}")
    if op.status != "open":
        raise Violation(f"{what} references operation {op_id}, which is already {op.status}")
    return op


def _pending_attempt(t: Tables, attempt_id: str, what: str) -> tuple[Attempt, Operation]:
    attempt = t.attempts.get(attempt_id)
    if attempt is None:
        raise Violation(f"{what} names unknown stepAttempt {attempt_id}")
    if attempt.status != "pending":
        raise Violation(
            f"{what} answers stepAttempt {attempt_id}, which is already {attempt.status}"
        )
    return attempt, _open_operation(t, attempt.operation_id, what)


# ---------------------------------------------------------------- entries


def _apply_entry(t: Tables, fact: EntryFact, position: int) -> None:
    body = fact.entry
    entry_type: EntryType
    if isinstance(body, ToolResultEntry):
        _apply_tool_result(t, fact, body)  # claims its reserved id itself
        entry_type = "toolResult"
    else:
        _claim_fact_id(t, fact.id)
        if isinstance(body, AssistantEntry):
            _apply_assistant(t, fact, body)
            entry_type = "assistant"
        elif isinstance(body, CompactionEntry):
            _apply_compaction(t, fact, body)
            entry_type = "compaction"
        elif isinstance(body, KernelNotice):
            apply_kernel_notice(t, fact, body)
            entry_type = "kernelNotice"
        else:
            assert isinstance(body, UserEntry)
            entry_type = "user"
    t.put(t.entries, fact.id, (len(t.lines), position, entry_type))
    op_id = t.open_operation_id
    if op_id is not None:
        op = t.operations[op_id]
        if op.unanswered_tool_calls:
            t.put(t.open_call_entries, fact.id, (op_id, op.answered_tool_calls))


def _apply_compaction(t: Tables, fact: EntryFact, body: CompactionEntry) -> None:
    through = body.throughEntryId
    slot = t.entries.get(through)
    if slot is None:
        raise Violation(f"compaction throughEntryId {through} is no earlier entry")
    cut = (slot[0], slot[1])
    if t.last_cut is not None and cut < t.last_cut:
        raise Violation(
            f"compaction throughEntryId {through} is before the previous compaction's cut "
            "(a cut never moves backwards)"
        )
    window = t.open_call_entries.get(through)
    if window is not None:
        op = t.operations[window[0]]
        if op.status == "open" or op.answered_tool_calls != window[1]:
            raise Violation(
                f"compaction throughEntryId {through} cuts between a tool call and its "
                "result (the cut must leave every tool call with its result on one side)"
            )
    if body.attemptId is not None:
        attempt, op = _pending_attempt(t, body.attemptId, "compaction")
        t.put(t.attempts, attempt.id, attempt.settled(fact.id, fact.at))  # a summary calls no tool
        t.put(t.operations, op.id, op.counted(attempts=-1))
    t.last_cut = cut


def _apply_assistant(t: Tables, fact: EntryFact, body: AssistantEntry) -> None:
    attempt, op = _pending_attempt(t, body.attemptId, "assistant entry")
    for call in body.message.toolCalls:
        _check_arguments(call.arguments, f"tool call {call.id!r}")
    calls = tuple((call.id, call.name) for call in body.message.toolCalls)
    if len({call_id for call_id, _ in calls}) != len(calls):
        raise Violation("assistant entry repeats a tool call id")
    t.put(t.attempts, attempt.id, attempt.settled(fact.id, fact.at, calls))
    t.put(t.operations, op.id, op.counted(attempts=-1, unanswered=len(calls)))


def _apply_tool_result(t: Tables, fact: EntryFact, body: ToolResultEntry) -> None:
    intent = t.intents.get(body.toolStartedId)
    if intent is None:
        raise Violation(f"tool result names unknown toolStarted {body.toolStartedId}")
    if intent.status != "pending":
        raise Violation(f"toolStarted {intent.id} already has a result ({intent.status})")
    if fact.id != intent.result_entry_id:
        raise Violation(
            f"tool result id {fact.id} is not the resultEntryId {intent.result_entry_id} "
            "reserved by its toolStarted"
        )
    if body.message.toolCallId != intent.tool_call_id:
        raise Violation(
            f"tool result answers toolCallId {body.message.toolCallId!r}, "
            f"its toolStarted was for {intent.tool_call_id!r}"
        )
    op = _open_operation(t, intent.operation_id, "tool result")
    t.put(t.ids, fact.id, "fact")
    t.put(t.intents, intent.id, intent.ended(body.outcome))
    t.put(t.operations, op.id, op.counted(intents=-1, unanswered=-1, answered=1))


def _check_arguments(arguments: object, whose: str) -> None:
    # The one free-form value of the format: checked here, on commit and on load alike,
    # so the store never writes a line its own reader refuses (docs/spec.md §4.4).
    problem = json_value_problem(arguments)
    if problem is not None:
        raise Violation(f"{whose} arguments: {problem}")


# ---------------------------------------------------------------- records


def _apply_record(t: Tables, fact: RecordFact, position: int) -> None:
    _claim_fact_id(t, fact.id)
    body = fact.record
    if isinstance(body, RunStarted):
        _apply_run_started(t, fact, body)
    elif isinstance(body, StepAttempt):
        _apply_step_attempt(t, fact, body)
    elif isinstance(body, AttemptFailed):
        attempt, op = _pending_attempt(t, body.attemptId, "attemptFailed")
        t.put(
            t.attempts,
            attempt.id,
            attempt._replace(
                status="failed", error=body.error, retryable=body.retryable, ended_at=fact.at
            ),
        )
        t.put(t.operations, op.id, op.counted(attempts=-1))
    elif isinstance(body, ToolStarted):
        _apply_tool_started(t, fact, body)
    elif isinstance(body, AbortRequested):
        op = _open_operation(t, body.operationId, "abortRequested")
        t.put(t.operations, op.id, op._replace(aborted_reason=body.reason))
    elif isinstance(body, SystemPrompt):
        _open_operation(t, body.operationId, "systemPrompt")
        t.system_prompt = (len(t.lines), position)  # read back from its line when asked
    elif isinstance(body, ContextWindow):
        # Learned between runs too (a listing): it names no run, only what told it.
        if body.attemptId is not None and body.attemptId not in t.attempts:
            raise Violation(f"contextWindow names unknown stepAttempt {body.attemptId}")
        window = LearnedWindow(body.tokens, body.source, fact.id)
        t.put(t.windows, (body.baseUrl, body.model), window)
    elif isinstance(body, KernelOpened):
        apply_kernel_opened(t, fact, body)
    else:
        assert isinstance(body, OperationFinished)
        _apply_operation_finished(t, body)


def _apply_run_started(t: Tables, fact: RecordFact, body: RunStarted) -> None:
    if t.open_operation_id is not None:
        raise Violation(
            f"runStarted while operation {t.open_operation_id} is still open "
            "(at most one operation is open at a time)"
        )
    _claim_fresh(t, body.operationId, "operationId")
    if body.inputEntryId is not None:
        entry = t.entries.get(body.inputEntryId)
        if entry is None or entry[2] != "user":
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
        if resumed.kind == "compaction":
            raise Violation(f"a resume continues a run; {resumed.id} is a compaction")
        if resumed.status in ("open", "completed"):
            raise Violation(
                f"a resume continues an operation that did not complete; "
                f"{resumed.id} is {resumed.status}"
            )
    t.put(t.ids, body.operationId, "operation")
    t.put(
        t.operations,
        body.operationId,
        Operation(
            id=body.operationId,
            kind=body.operationKind,
            status="open",
            input_entry_id=body.inputEntryId,
            resumes_operation_id=body.resumesOperationId,
            started_at=fact.at,
        ),
    )
    t.open_operation_id = body.operationId


def _apply_step_attempt(t: Tables, fact: RecordFact, body: StepAttempt) -> None:
    op = _open_operation(t, body.operationId, "stepAttempt")
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
            provider=body.provider,
            model=body.model,
            configuration_digest=body.configurationDigest,
            started_at=fact.at,
        ),
    )
    t.put(t.operations, op.id, op.counted(attempts=1))  # from none (checked above)


def _apply_tool_started(t: Tables, fact: RecordFact, body: ToolStarted) -> None:
    op = _open_operation(t, body.operationId, "toolStarted")
    attempt = t.attempts.get(body.attemptId)
    if attempt is None or attempt.status != "settled":
        raise Violation(f"toolStarted attemptId {body.attemptId} is no settled stepAttempt")
    if attempt.operation_id != op.id:
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
    if call_key in t.intent_by_call:
        raise Violation(
            f"tool call {body.toolCallId!r} already has toolStarted {t.intent_by_call[call_key]}"
        )
    _claim_fresh(t, body.resultEntryId, "resultEntryId")
    _check_arguments(body.arguments, "toolStarted")  # before replay_key encodes them
    expected_key = replay_key(body.tool, body.arguments, body.environmentIdentity)
    if body.replayKey != expected_key:
        raise Violation(
            f"replayKey {body.replayKey} does not match its tool, arguments and environment"
        )
    t.put(t.ids, body.resultEntryId, "reserved")
    t.put(t.intent_by_call, call_key, fact.id)
    t.put(
        t.intents,
        fact.id,
        ToolIntent(
            id=fact.id,
            operation_id=op.id,
            attempt_id=attempt.id,
            tool_call_id=body.toolCallId,
            tool=body.tool,
            arguments=body.arguments,
            replay_policy=body.replayPolicy,
            environment_identity=body.environmentIdentity,
            replay_key=body.replayKey,
            result_entry_id=body.resultEntryId,
        ),
    )
    t.put(t.operations, op.id, op.counted(intents=1))


def _apply_operation_finished(t: Tables, body: OperationFinished) -> None:
    op = _open_operation(t, body.operationId, "operationFinished")
    if op.pending_attempts:
        raise Violation(f"operationFinished while operation {op.id} has a pending stepAttempt")
    if op.pending_intents:
        raise Violation(
            f"operationFinished while operation {op.id} has {op.pending_intents} "
            "toolStarted without a result"
        )
    t.put(t.operations, op.id, op._replace(status=body.outcome, detail=body.detail))
    t.open_operation_id = None


# ---------------------------------------------------------------- usage


def _apply_usage(t: Tables, fact: UsageFact) -> None:
    _claim_fact_id(t, fact.id)
    u = fact.usage
    target = u.target_id
    if u.attemptId is not None:
        owner = t.attempts.get(target)
        if owner is None:
            raise Violation(f"usage names unknown stepAttempt {target}")
        op_id = owner.operation_id
    else:
        intent = t.intents.get(target)
        if intent is None:
            raise Violation(f"usage names unknown toolStarted {target}")
        op_id = intent.operation_id
    if target in t.usage:
        raise Violation(f"{target} already has usage (one usage fact per attempt or tool)")
    _open_operation(t, op_id, "usage")
    t.put(t.usage, target, usage_row(u))
    t.add_usage(u)
