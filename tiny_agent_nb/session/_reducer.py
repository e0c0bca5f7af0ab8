"""The pure reduction: one fact at a time, every invariant of docs/session-format.md §4.

`apply_fact` checks a fact against the tables and then records it there (each check
reads only what the fact references, so its cost is independent of history). On load
it writes straight into the session's tables (a violation aborts the whole load). On
commit the tables log every write (`Tables.put`), so the store rolls the transaction
back exactly when a later fact is refused or the write fails: a refused commit changes
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from ._exceptions import InvalidTransactionError
from ._facts import NewFact
from ._framing import describe_validation_error
from ._ids import is_uuid7, new_id
from ._models import (
    AssistantEntry,
    CompactionEntry,
    EntryFact,
    Fact,
    KernelNotice,
    RecordFact,
    ToolResultEntry,
    UsageFact,
    UserEntry,
)
from ._operations import (
    apply_file_restore,
    apply_kernel_notice,
    apply_kernel_opened,
    apply_operation_finished,
    apply_operation_started,
    apply_step_attempt,
    apply_tool_started,
    check_arguments,
    open_operation,
    pending_attempt,
)
from ._records import (
    AbortRequested,
    AttemptFailed,
    ContextWindow,
    FileRestore,
    KernelOpened,
    OperationFinished,
    OperationStarted,
    StepAttempt,
    SystemPrompt,
    ToolStarted,
)
from ._tables import LearnedWindow, Spend, Tables, Violation
from ._usage import usage_in_range


def build_transaction(tables: Tables, facts: Sequence[NewFact], at: int) -> list[Fact]:
    """The facts of one commit, each given its seq, id and `at`, checked against every
    rule (docs/session-format.md §4) and applied to `tables` in order (the caller rolls them back
    if the line is not written). InvalidTransactionError names the fact that broke one."""
    built: list[Fact] = []
    for index, new in enumerate(facts):
        fact_id = new.id if new.id is not None else new_id()
        try:
            # The envelope model checks a reserved id's UUIDv7 pattern; nothing else
            # in it can be wrong (seq, at and the validated payload come from here).
            fact = new.build(seq=tables.last_seq + 1, fact_id=fact_id, at=at)
        except ValidationError as exc:
            reason = describe_validation_error(exc)
            if not is_uuid7(fact_id):
                reason = f"id {fact_id!r} is not a UUIDv7"
            raise InvalidTransactionError(reason, index=index) from None
        try:
            apply_fact(tables, fact)
        except Violation as exc:
            raise InvalidTransactionError(str(exc), index=index) from None
        built.append(fact)
    return built


def apply_transaction(tables: Tables, facts: Sequence[Fact]) -> None:
    for index, fact in enumerate(facts):
        try:
            apply_fact(tables, fact)
        except Violation as exc:
            exc.args = (f"fact {index + 1} (seq {fact.seq}): {exc.args[0]}",)
            raise


def apply_fact(t: Tables, fact: Fact) -> None:
    """Check and record `fact`."""
    if fact.seq != t.last_seq + 1:
        raise Violation(f"seq {fact.seq} should be {t.last_seq + 1}")
    if isinstance(fact, EntryFact):
        _apply_entry(t, fact)
    elif isinstance(fact, RecordFact):
        _apply_record(t, fact)
    else:
        _apply_usage(t, fact)
    t.last_seq = fact.seq


def _claim_fact_id(t: Tables, fact_id: str) -> None:
    if fact_id in t.ids:
        raise Violation(f"id {fact_id} is already used")
    t.put(t.ids, fact_id, "fact")


# ---------------------------------------------------------------- entries


def _apply_entry(t: Tables, fact: EntryFact) -> None:
    body = fact.entry
    if isinstance(body, ToolResultEntry):
        _apply_tool_result(t, fact, body)  # claims its reserved id itself
    else:
        _claim_fact_id(t, fact.id)
        if isinstance(body, AssistantEntry):
            _apply_assistant(t, fact, body)
        elif isinstance(body, CompactionEntry):
            _apply_compaction(t, fact, body)
        elif isinstance(body, KernelNotice):
            apply_kernel_notice(t, fact, body)
        else:
            assert isinstance(body, UserEntry)
    if t.detached:  # the first entry after a rewind: its parent is not the one before it
        t.put(t.parents, fact.id, t.head)
        t.detached = False
    t.head = fact.id
    t.put(t.entries, fact.id, fact)
    op_id = t.open_operation_id
    if op_id is not None:
        op = t.operations[op_id]
        if op.unanswered_tool_calls:
            t.put(t.open_call_entries, fact.id, (op_id, op.answered_tool_calls))


def _apply_compaction(t: Tables, fact: EntryFact, body: CompactionEntry) -> None:
    through = body.throughEntryId
    entry = t.entries.get(through)
    if entry is None:
        raise Violation(f"compaction throughEntryId {through} is no earlier entry")
    cut = entry.seq
    if (t.parents or t.detached) and through not in t.entry_path():
        raise Violation(f"compaction throughEntryId {through} is not on the conversation's path")
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
        attempt, op = pending_attempt(t, body.attemptId, "compaction")
        t.put(t.attempts, attempt.id, attempt.settled(fact.id, fact.at))  # a summary calls no tool
        t.put(t.operations, op.id, op.counted(attempts=-1))
        _bill_settled(t, attempt.id, op.id)
    t.last_cut = cut


def _apply_assistant(t: Tables, fact: EntryFact, body: AssistantEntry) -> None:
    attempt, op = pending_attempt(t, body.attemptId, "assistant entry")
    for call in body.message.toolCalls:
        check_arguments(call.arguments, f"tool call {call.id!r}")
    calls = tuple((call.id, t.share(call.name)) for call in body.message.toolCalls)
    if len({call_id for call_id, _ in calls}) != len(calls):
        raise Violation("assistant entry repeats a tool call id")
    t.put(t.attempts, attempt.id, attempt.settled(fact.id, fact.at, calls))
    t.put(t.operations, op.id, op.counted(attempts=-1, unanswered=len(calls)))
    _bill_settled(t, attempt.id, op.id)


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
    op = open_operation(t, intent.operation_id, "tool result")
    t.put(t.ids, fact.id, "fact")
    t.put(t.intents, intent.id, intent.ended(body.outcome))
    t.put(t.operations, op.id, op.counted(intents=-1, unanswered=-1, answered=1))


# ---------------------------------------------------------------- records


def _apply_record(t: Tables, fact: RecordFact) -> None:
    _claim_fact_id(t, fact.id)
    body = fact.record
    if isinstance(body, OperationStarted):
        apply_operation_started(t, fact, body)
        _open_spend(t, body.operationId, body.operationKind)
    elif isinstance(body, StepAttempt):
        apply_step_attempt(t, fact, body)
    elif isinstance(body, AttemptFailed):
        attempt, op = pending_attempt(t, body.attemptId, "attemptFailed")
        t.put(
            t.attempts,
            attempt.id,
            attempt._replace(
                status="failed", error=body.error, retryable=body.retryable, ended_at=fact.at
            ),
        )
        t.put(t.operations, op.id, op.counted(attempts=-1))
    elif isinstance(body, ToolStarted):
        apply_tool_started(t, fact, body)
    elif isinstance(body, AbortRequested):
        op = open_operation(t, body.operationId, "abortRequested")
        t.put(t.operations, op.id, op._replace(aborted_reason=body.reason))
    elif isinstance(body, SystemPrompt):
        open_operation(t, body.operationId, "systemPrompt")
        t.system_prompt = body.content
    elif isinstance(body, ContextWindow):
        # Learned between runs too (a listing): it names no run, only what told it.
        if body.attemptId is not None and body.attemptId not in t.attempts:
            raise Violation(f"contextWindow names unknown stepAttempt {body.attemptId}")
        window = t.row(LearnedWindow, body, fact_id=fact.id)
        t.put(t.windows, (body.baseUrl, body.model), window)
    elif isinstance(body, KernelOpened):
        apply_kernel_opened(t, fact, body)
    elif isinstance(body, FileRestore):
        apply_file_restore(t, fact, body)
    else:
        assert isinstance(body, OperationFinished)
        apply_operation_finished(t, body)


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
    if open_operation(t, op_id, "usage").kind == "replay":
        raise Violation(f"operation {op_id} is a replay: it spends nothing, so has no usage")
    t.put(t.usage, target, u)
    t.add_usage(u)
    if usage_in_range(u):  # else no usage (docs/spec.md §4)
        # A settled attempt was billed as unknown when it settled without usage.
        settled = u.attemptId is not None and t.attempts[target].status == "settled"
        _bill(t, op_id, u.cost or 0.0, (u.cost is None) - settled)


# ---------------------------------------------------------------- spend


def _open_spend(t: Tables, op_id: str, kind: str) -> None:
    """A run's own spend starts at nothing; a compaction bills the run before it (a
    compaction spends the budget of the run whose context it shrank)."""
    if kind == "compaction":
        for op in reversed(t.operations.values()):
            if op.kind != "compaction":
                t.put(t.billed_to, op_id, op.id)
                _bill(t, op_id, operations=1)
                return
    t.put(t.spends, op_id, Spend(0.0, 0, 1))


def _bill(t: Tables, op_id: str, cost: float = 0.0, unknown: int = 0, operations: int = 0) -> None:
    owner = t.billed_to.get(op_id, op_id)
    spent = t.spends[owner]
    t.put(
        t.spends,
        owner,
        Spend(spent.cost + cost, spent.unknown + unknown, spent.operations + operations),
    )


def _bill_settled(t: Tables, attempt_id: str, op_id: str) -> None:
    """An answered request was billed: at a price unknown until its usage says one."""
    usage = t.usage.get(attempt_id)
    if usage is None or not usage_in_range(usage):
        _bill(t, op_id, unknown=1)
