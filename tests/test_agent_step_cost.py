"""What a step reads: one copy of the state per attempt, to build its context from; the
figures the loop checks before each attempt (the server's count of the last request, the
run's spend) are read from the newest attempts and the reducer's rows, with no copy of
their own (docs/benchmarks.md, register row "budget-follow")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from test_agent_loop import Harness, workspace

from tiny_agent_nb.session import (
    InvalidTransactionError,
    NewFact,
    SessionState,
    SessionStore,
    Spend,
    load_session,
    new_id,
)
from tiny_agent_nb.session import facts as f

from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply, usage
from helpers.scenario import READ_FILE, Run

__all__ = ["workspace"]  # the fixture, shared with test_agent_loop


def _script(server: OpenAIServer, steps: int, prompt_tokens: int = 100) -> None:
    for n in range(steps):
        server.enqueue(
            tool_calls_reply(
                tool_call(f"c{n}", "read_file", {"path": "README.md"}),
                usage=usage(prompt_tokens, 10, cost=0.0001),
            )
        )
    server.enqueue(text_reply("done", usage=usage(prompt_tokens, 5, cost=0.0001)))


def _snapshots_taken(h: Harness, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    taken = [0]
    load = h.store.load

    def counting_load() -> object:
        taken[0] += 1
        return load()

    monkeypatch.setattr(h.store, "load", counting_load)
    return lambda: taken[0]


def test_a_run_with_a_budget_and_compaction_takes_one_snapshot_per_attempt(
    server: OpenAIServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both checks live: a budget, and a window the ledger's count is compared with.
    h = Harness(server, workspace, budget=10.0, context_window=10**6, compact_threshold=0.8)
    snapshots = _snapshots_taken(h, monkeypatch)
    try:
        taken: dict[int, int] = {}
        for runs in (1, 12):
            while len(load_session(h.path).operations) < runs - 1:
                _script(server, 3)
                assert h.loop.run("Read the readme three times").outcome == "completed"
            before = snapshots()
            _script(server, 4)
            assert h.loop.run("Read the readme four times").outcome == "completed"
            taken[runs] = snapshots() - before
    finally:
        h.close()
    # One per attempt (5 here), whatever the history: the checks add none.
    assert taken == {1: 5, 12: 5}
    assert len(load_session(h.path).attempts) == 10 * 4 + 2 * 5  # the history did grow


def test_the_servers_count_of_the_last_request_triggers_compaction(
    server: OpenAIServer, workspace: Path
) -> None:
    # The requests are a few hundred bytes (~100 tokens estimated), but the server counts
    # 3,500 input tokens: past 0.8 x 4,000, so the run compacts before its second attempt.
    (workspace / "big.txt").write_text("y" * 2000)
    server.enqueue(
        tool_calls_reply(
            tool_call("r1", "read_file", {"path": "big.txt"}), usage=usage(3500, 10, cost=0.001)
        ),
        text_reply("done", usage=usage(3500, 5)),
    )
    server.enqueue_summaries(text_reply("SUMMARY: read big.txt", usage=usage(900, 40)))
    h = Harness(server, workspace, context_window=4000, compact_threshold=0.8, keep_tail_tokens=10)
    try:
        assert h.loop.run("Read big.txt").outcome == "completed"
    finally:
        h.close()
    assert len(h.compactions) == 1
    assert h.compactions[0].tokens_before == 3500


def _scanned_spend(state: SessionState, operation_id: str) -> Spend:
    """docs/spec.md §4 read from the whole ledger: the chain (the operation, the runs it
    resumes, the compactions after any of them), its priced usage summed, and counted
    apart the settled attempts without usage and the usage without a cost."""
    chain: list[str] = []
    current: str | None = operation_id
    while current is not None and current not in chain:
        chain.append(current)
        current = state.operations[current].resumes_operation_id
    after = None
    for op in state.operations.values():
        if op.kind != "compaction":
            after = op.id
        elif after in chain:
            chain.append(op.id)
    cost, unknown = 0.0, 0
    for attempt in state.attempts.values():
        if attempt.operation_id in chain:
            u = state.usage.get(attempt.id)
            if u is None:
                unknown += attempt.status == "settled"
            elif u.cost is None:
                unknown += 1
            else:
                cost += u.cost
    for intent in state.tool_intents.values():
        if intent.operation_id in chain and (u := state.usage.get(intent.id)) is not None:
            cost, unknown = cost + (u.cost or 0.0), unknown + (u.cost is None)
    return Spend(round(cost, 12), unknown, len(chain))


def _scanned_tokens(state: SessionState) -> int | None:
    """The server's count of the newest settled attempt, from the state's public views:
    none when a compaction settled it or it reported no usage."""
    for attempt in state.attempts_newest_first():
        if attempt.status == "settled":
            if state.entries.type_of(attempt.entry_id or "") != "assistant":
                return None
            usage = state.usage.get(attempt.id)
            return usage.inputTokens if usage is not None else None
    return None


def test_the_kept_figures_match_the_ledger_after_every_commit(store: SessionStore) -> None:
    """Every shape of ledger the reducer accepts for the two figures: usage in the
    settling transaction, before it and after it; no usage; a null cost; failed attempts
    with and without usage; tool usage; a compaction; a resume of an interrupted run; a
    compaction of its own after it."""
    checked: list[str] = []

    def commit(facts: list[NewFact], operation_id: str) -> None:
        store.commit(facts)
        state = store.load()
        assert store.spend(operation_id) == _scanned_spend(state, operation_id)
        assert store.last_input_tokens() == _scanned_tokens(state)
        checked.append(operation_id)

    env = store.header.environmentIdentity
    first = Run(environment=env)
    op = first.operation_id
    commit(first.start("Read"), op)
    commit(first.attempt(), op)
    commit(first.answer(None, [("c1", "read_file", {"path": "a"})]), op)  # usage with it
    intent = first.intent("c1", READ_FILE, {"path": "a"})
    commit([intent], op)
    commit([first.result(intent, "A")], op)
    commit([f.usage(tool_started_id=intent.id, input_tokens=1, cost=0.5)], op)
    commit(first.attempt(), op)
    attempt = first.attempt_id or ""
    commit([f.usage(attempt_id=attempt, input_tokens=700, cost=None)], op)  # before settling
    commit(first.answer(None, [("c2", "read_file", {"path": "b"})])[:1], op)
    intent = first.intent("c2", READ_FILE, {"path": "b"})
    commit([intent], op)
    commit([first.result(intent, "B")], op)
    commit(first.attempt(), op)
    failed = first.attempt_id or ""
    commit([f.usage(attempt_id=failed, input_tokens=900, cost=0.25)], op)
    commit([f.attempt_failed(failed, kind="http", message="503", retryable=True)], op)
    commit(first.attempt(2), op)
    commit([f.attempt_failed(first.attempt_id or "", kind="http", message="x", retryable=True)], op)
    commit(first.attempt(3), op)
    commit(first.answer("Done", cost=0.125)[:1], op)  # settled, no usage yet: unknown
    commit([f.usage(attempt_id=first.attempt_id, input_tokens=800, cost=0.125)], op)
    commit([f.NewFact(f.OperationFinished(operationId=op, outcome="interrupted"))], op)

    resumed = Run(environment=env)
    again = resumed.operation_id
    commit([f.resume_started(again, op)], again)
    commit(resumed.attempt(), again)
    entries = list(store.load().entries)
    commit(
        [
            f.NewFact(
                f.CompactionEntry(
                    summary="SUMMARY", throughEntryId=entries[-1], attemptId=resumed.attempt_id
                )
            ),
            f.usage(attempt_id=resumed.attempt_id, input_tokens=300, cost=0.0625),
        ],
        again,
    )
    commit(resumed.attempt(), again)
    commit(resumed.answer("Still done", cost=None), again)
    commit([f.NewFact(f.OperationFinished(operationId=again, outcome="completed"))], again)

    compacting = Run(environment=env)  # `%agent compact`: billed to the run before it
    commit([f.compaction_started(compacting.operation_id)], again)
    commit(compacting.attempt(), again)
    entries = list(store.load().entries)
    commit(
        [
            f.NewFact(
                f.CompactionEntry(
                    summary="AGAIN", throughEntryId=entries[-1], attemptId=compacting.attempt_id
                )
            )
        ],
        again,
    )
    commit([f.usage(attempt_id=compacting.attempt_id, input_tokens=30, cost=0.5)], again)
    assert len(checked) > 20
    assert store.spend(again).operations == 3


def test_a_refused_commit_leaves_the_spend_as_it_was(store: SessionStore) -> None:
    """The spend rows are written through `Tables.put`: a transaction refused half-way
    (its usage applied, a later fact refused) rolls them back with the rest."""
    run = Run(environment=store.header.environmentIdentity)
    op = run.operation_id
    store.commit(run.start("Read"))
    store.commit(run.attempt())
    store.commit(run.answer("Done")[:1])  # settled without usage: an unknown cost
    assert store.spend(op) == (0.0, 1, 1)
    priced = f.usage(attempt_id=run.attempt_id, input_tokens=10, cost=0.5)
    with pytest.raises(InvalidTransactionError):
        store.commit([priced, f.usage(attempt_id=new_id(), input_tokens=1)])
    assert store.spend(op) == (0.0, 1, 1)
    assert store.last_input_tokens() is None
    store.commit([priced])
    assert store.spend(op) == (0.5, 0, 1)
    assert store.last_input_tokens() == 10
