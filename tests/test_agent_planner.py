"""The planner, table-driven over every state a session file can be left in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tiny_agent_nb.agent import plan_recovery, resumable_operation
from tiny_agent_nb.agent._planner import abort_settlement, failure_settlement
from tiny_agent_nb.session import (
    HeaderInit,
    NewFact,
    SessionState,
    SessionStore,
    ToolIdentity,
    load_session_bytes,
)
from tiny_agent_nb.session import facts as f

from helpers.scenario import BASH, READ_FILE, Run, intent_result

TOOLS = {"read_file": READ_FILE, "bash": BASH}


@dataclass
class Built:
    store: SessionStore
    run: Run
    intents: dict[str, str]  # call id -> toolStarted id


Scenario = Callable[[Built], None]


def _start(b: Built) -> None:
    b.store.commit(b.run.start("go"))


def _attempt(b: Built) -> None:
    b.store.commit(b.run.attempt())


def _answer_calls(b: Built) -> None:
    b.store.commit(
        b.run.answer(
            None,
            [("r1", "read_file", {"path": "a.txt"}), ("b1", "bash", {"command": "touch x"})],
        )
    )


def _intent(call_id: str) -> Scenario:
    def step(b: Built) -> None:
        tool, args = (
            (READ_FILE, {"path": "a.txt"}) if call_id == "r1" else (BASH, {"command": "touch x"})
        )
        intent = b.run.intent(call_id, tool, args)
        b.store.commit([intent])
        assert intent.id is not None
        b.intents[call_id] = intent.id

    return step


def _result(call_id: str) -> Scenario:
    def step(b: Built) -> None:
        intent = b.store.load().tool_intents[b.intents[call_id]]
        b.store.commit(
            [
                f.tool_result(
                    tool_started_id=intent.id,
                    result_entry_id=intent.result_entry_id,
                    tool_call_id=intent.tool_call_id,
                    content="ok",
                    outcome="completed",
                )
            ]
        )

    return step


def _answer_text(b: Built) -> None:
    b.store.commit(b.run.answer("done"))


def _fail_attempt(b: Built) -> None:
    assert b.run.attempt_id is not None
    b.store.commit([f.attempt_failed(b.run.attempt_id, kind="http", message="503", retryable=True)])


def _finish(b: Built) -> None:
    b.store.commit(b.run.finish())


def _earlier_exchange(b: Built) -> None:
    """A whole completed run before the one the case is about (something to compact)."""
    earlier = Run(environment=b.run.environment)
    b.store.commit(earlier.start("hi"))
    b.store.commit(earlier.attempt())
    b.store.commit(earlier.answer("hello"))
    b.store.commit(earlier.finish())


def _compaction_started(b: Built) -> None:
    b.store.commit([f.compaction_started(b.run.operation_id)])


def _compaction_committed(b: Built) -> None:
    last = b.store.load().entries.last()
    assert last is not None and b.run.attempt_id is not None
    attempt_id = b.run.attempt_id
    b.store.commit(
        [
            f.NewFact(
                f.CompactionEntry(
                    summary="they said hello",
                    throughEntryId=last.id,
                    attemptId=attempt_id,
                    tokensBefore=120,
                )
            ),
            f.usage(attempt_id=attempt_id, input_tokens=120, output_tokens=8, cost=0.0001),
        ]
    )


@dataclass(frozen=True)
class Case:
    name: str
    steps: tuple[Scenario, ...]
    replay: tuple[str, ...] = ()  # call ids replayed
    interrupt: tuple[str, ...] = ()  # call ids interrupted
    failed_attempts: int = 0
    open: bool = True
    closed_as: str = "interrupted"  # the operation's outcome after recovery
    resumable: bool = True  # `%agent resume` continues it after recovery


CASES = [
    Case("no operation", (), open=False),
    Case("completed run", (_start, _attempt, _answer_text, _finish), open=False),
    Case("killed right after runStarted", (_start,)),
    Case("killed while the request was in flight", (_start, _attempt), failed_attempts=1),
    Case("killed during a retry", (_start, _attempt, _fail_attempt, _attempt), failed_attempts=1),
    Case("killed after the assistant entry, before any tool", (_start, _attempt, _answer_calls)),
    Case(
        "killed after a read intent, before its result",
        (_start, _attempt, _answer_calls, _intent("r1")),
        replay=("r1",),
    ),
    Case(
        "killed after a bash intent, before its result",
        (_start, _attempt, _answer_calls, _intent("r1"), _result("r1"), _intent("b1")),
        interrupt=("b1",),
    ),
    Case(
        "killed after every result, before the next attempt",
        (
            _start,
            _attempt,
            _answer_calls,
            _intent("r1"),
            _result("r1"),
            _intent("b1"),
            _result("b1"),
        ),
    ),
    Case(
        "killed during the next request",
        (
            _start,
            _attempt,
            _answer_calls,
            _intent("r1"),
            _result("r1"),
            _intent("b1"),
            _result("b1"),
            _attempt,
        ),
        failed_attempts=1,
    ),
    # compaction (docs/spec.md §3): the context is exactly as it was until the compaction
    # entry commits, and exactly the checkpoint after
    Case(
        "compaction operation killed right after runStarted",
        (_earlier_exchange, _compaction_started),
        resumable=False,
    ),
    Case(
        "compaction operation killed during the summarization request",
        (_earlier_exchange, _compaction_started, _attempt),
        failed_attempts=1,
        resumable=False,
    ),
    Case(
        "compaction operation killed during a retry of the summarization",
        (_earlier_exchange, _compaction_started, _attempt, _fail_attempt, _attempt),
        failed_attempts=1,
        resumable=False,
    ),
    Case(
        "compaction operation killed after the compaction committed",
        (_earlier_exchange, _compaction_started, _attempt, _compaction_committed),
        closed_as="completed",
        resumable=False,
    ),
    Case(
        "run killed during its own compaction request",
        (_earlier_exchange, _start, _attempt, _answer_text, _attempt),
        failed_attempts=1,
    ),
    Case(
        "run killed after its own compaction committed",
        (_earlier_exchange, _start, _attempt, _answer_text, _attempt, _compaction_committed),
    ),
]


ENV = "/work/project"


def _build(steps: tuple[Scenario, ...]) -> tuple[SessionState, bytearray]:
    """The session the steps leave, and its file's bytes (in memory: the planner reads
    only states, and the store's code is the same over a bytearray as over a file)."""
    init = HeaderInit(cwd=ENV, provider="openrouter", model="m", environment_identity=ENV)
    buffer = bytearray()
    with SessionStore.in_memory(buffer, create=init) as store:
        built = Built(store, Run(environment=ENV), {})
        for step in steps:
            step(built)
        return store.load(), buffer


def _call_ids(state: SessionState, intents: tuple[object, ...]) -> tuple[str, ...]:
    return tuple(i.tool_call_id for i in intents)  # type: ignore[attr-defined]


def _settled(
    steps: tuple[Scenario, ...],
    settle: Callable[[SessionState, str, str], list[NewFact] | None],
    reason: str,
) -> tuple[str, list[NewFact], SessionState]:
    """Builds the steps, settles their open operation with `settle` (the planner's abort
    or failure settlement) and commits that with the end the loop gives it: the
    operation's id, the transaction, and the state the file loads to after it."""
    state, buffer = _build(steps)
    op = state.open_operation
    assert op is not None
    settled = settle(state, op.id, reason)
    assert settled is not None
    outcome = "aborted" if settle is abort_settlement else "failed"
    transaction = [
        *settled,
        f.NewFact(f.OperationFinished(operationId=op.id, outcome=outcome, detail=reason)),
    ]
    with SessionStore.in_memory(buffer) as store:
        store.commit(transaction)
        return op.id, transaction, store.load()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_recovery_plan(case: Case) -> None:
    state, _ = _build(case.steps)
    plan = plan_recovery(state, TOOLS, ENV)
    if not case.open:
        assert plan is None
        return
    assert plan is not None
    assert _call_ids(state, plan.replay) == case.replay
    assert _call_ids(state, plan.interrupt) == case.interrupt
    assert len(plan.fail) == case.failed_attempts
    assert resumable_operation(state) == "open"


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.open], ids=[c.name for c in CASES if c.open]
)
def test_recovery_closes_the_operation_and_a_second_plan_is_empty(
    case: Case,
) -> None:
    state, buffer = _build(case.steps)
    plan = plan_recovery(state, TOOLS, ENV)
    assert plan is not None
    with SessionStore.in_memory(buffer) as store:
        for intent in plan.replay:  # stand-in for running the read: the loop tests do it for real
            store.commit([intent_result(intent, "replayed", "replayed")])
        store.commit(plan.closing_transaction())
    after = load_session_bytes(bytes(buffer))
    op = after.operations[plan.operation.id]
    assert op.status == case.closed_as
    assert all(i.status != "pending" for i in after.tool_intents.values())
    assert all(a.status != "pending" for a in after.attempts.values())
    assert plan_recovery(after, TOOLS, ENV) is None
    assert resumable_operation(after) == (op if case.resumable else "completed")
    # recovery only answers intents: it never adds, nor drops, a compaction checkpoint
    assert list(after.entries)[: len(state.entries)] == list(state.entries)
    added = [after.entries.type_of(e) for e in list(after.entries)[len(state.entries) :]]
    assert set(added) <= {"toolResult"}


def test_compaction_between_an_interrupted_run_and_its_resume_is_passed_over() -> None:
    state, buffer = _build((_start, _attempt, _answer_text))
    with SessionStore.in_memory(buffer) as store:
        plan = plan_recovery(state, TOOLS, ENV)
        assert plan is not None
        store.commit(plan.closing_transaction())
        compaction = Built(store, Run(environment=ENV), {})
        for step in (_compaction_started, _attempt, _compaction_committed):
            step(compaction)
        store.commit(compaction.run.finish())
    after = load_session_bytes(bytes(buffer))
    assert resumable_operation(after) == after.operations[plan.operation.id]


@pytest.mark.parametrize(
    ("why", "tools", "environment"),
    [
        ("workspace moved", TOOLS, "/somewhere/else"),
        (
            "tool version changed",
            {**TOOLS, "read_file": ToolIdentity(name="read_file", version="2", source="builtin")},
            None,
        ),
        ("tool no longer registered", {"bash": BASH}, None),
    ],
)
def test_read_is_not_replayed_when_identity_changed(
    why: str, tools: dict[str, ToolIdentity], environment: str | None
) -> None:
    state, _ = _build((_start, _attempt, _answer_calls, _intent("r1")))
    plan = plan_recovery(state, tools, environment or ENV)
    assert plan is not None
    assert plan.replay == (), why
    assert _call_ids(state, plan.interrupt) == ("r1",), why


def test_abort_resolves_what_is_in_flight() -> None:
    steps = (_start, _attempt, _answer_calls, _intent("r1"), _result("r1"), _intent("b1"))
    op_id, transaction, after = _settled(steps, abort_settlement, "KeyboardInterrupt")
    kinds = [type(t.body).__name__ for t in transaction]
    assert kinds == ["AbortRequested", "ToolResultEntry", "OperationFinished"]
    assert after.operations[op_id].status == "aborted"
    assert resumable_operation(after) == after.operations[op_id]
    assert abort_settlement(after, op_id, "again") is None


def test_abort_during_request_fails_the_attempt_as_aborted() -> None:
    _, _, after = _settled((_start, _attempt), abort_settlement, "KeyboardInterrupt")
    (attempt,) = after.attempts.values()
    assert attempt.status == "failed" and attempt.error is not None
    assert attempt.error.kind == "aborted"


def test_nothing_to_resume_after_a_completed_run() -> None:
    assert resumable_operation(_build(())[0]) == "nothing"
    done, _ = _build((_start, _attempt, _answer_text, _finish))
    assert resumable_operation(done) == "completed"


def test_a_failure_settles_what_is_in_flight_and_finishes_failed_without_an_abort() -> None:
    steps = (_start, _attempt, _answer_calls, _intent("r1"), _intent("b1"))
    reason = "stopped by an unexpected error: TypeError: boom"
    op_id, transaction, after = _settled(steps, failure_settlement, reason)
    kinds = [type(t.body).__name__ for t in transaction]
    assert kinds == ["ToolResultEntry", "ToolResultEntry", "OperationFinished"]
    assert (after.operations[op_id].status, after.operations[op_id].detail) == ("failed", reason)
    assert [i.status for i in after.tool_intents.values()] == ["interrupted", "interrupted"]
    assert resumable_operation(after) == "completed"  # a failed run is not resumed
    assert failure_settlement(after, op_id, "again") is None


def test_a_failure_during_a_request_fails_the_attempt_with_the_reason() -> None:
    _, _, after = _settled((_start, _attempt), failure_settlement, "TypeError: boom")
    (attempt,) = after.attempts.values()
    assert attempt.status == "failed" and attempt.error is not None
    assert (attempt.error.kind, attempt.error.message) == ("interrupted", "TypeError: boom")
