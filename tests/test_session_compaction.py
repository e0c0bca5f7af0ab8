"""Compaction checkpoints in the file (docs/session-format.md §4, docs/spec.md §3): the cut,
the attempt it settles, the compaction operation, and refused commits that change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tiny_agent_nb.session import (
    InvalidTransactionError,
    SessionStore,
    load_session,
    new_id,
)
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.session._records import OperationStarted

from helpers.scenario import BASH, Run


def _tool_run(store: SessionStore) -> tuple[Run, str, str, str]:
    """A run with one bash call: returns (run, assistant entry, result entry, answer)."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("List the files"))
    store.commit(run.attempt())
    asked = store.commit(run.answer(None, [("call_1", "bash", {"command": "ls"})]))
    intent = run.intent("call_1", BASH, {"command": "ls"})
    store.commit([intent])
    result = store.commit([run.result(intent, "README.md\n")])
    store.commit(run.attempt())
    answer = store.commit(run.answer("One file."))
    store.commit(run.finish())
    return run, asked[0].id, result[0].id, answer[0].id


def test_cut_between_a_tool_call_and_its_result_is_refused(store: SessionStore) -> None:
    _, asked, result, _ = _tool_run(store)
    before = store.path.read_bytes()
    with pytest.raises(InvalidTransactionError, match="cuts between a tool call and its result"):
        store.commit([f.NewFact(f.CompactionEntry(summary="ls was run", throughEntryId=asked))])
    assert store.path.read_bytes() == before
    store.commit(
        [f.NewFact(f.CompactionEntry(summary="ls was run", throughEntryId=result))]
    )  # after the result: clean
    assert load_session(store.path).summary() == store.load().summary()


def test_cut_inside_the_open_run_with_a_pending_call_is_refused(store: SessionStore) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("List the files"))
    store.commit(run.attempt())
    asked = store.commit(run.answer(None, [("call_1", "bash", {"command": "ls"})]))
    # the call has no result yet, and the open run may still give it one
    with pytest.raises(InvalidTransactionError, match="cuts between"):
        store.commit([f.NewFact(f.CompactionEntry(summary="ls asked", throughEntryId=asked[0].id))])


def test_cut_after_a_call_that_never_started_is_clean_once_the_run_ended(
    store: SessionStore,
) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("List the files"))
    store.commit(run.attempt())
    asked = store.commit(run.answer(None, [("call_1", "bash", {"command": "ls"})]))
    store.commit(run.finish("aborted"))  # the call never got an intent: it never ran
    store.commit(
        [
            f.NewFact(
                f.CompactionEntry(summary="ls was asked for, never ran", throughEntryId=asked[0].id)
            )
        ]
    )


def test_cut_never_moves_backwards_and_a_refused_commit_keeps_the_last_cut(
    store: SessionStore,
) -> None:
    _, _, result, answer = _tool_run(store)
    first = store.commit(
        [f.NewFact(f.CompactionEntry(summary="ls was run", throughEntryId=result))]
    )
    with pytest.raises(InvalidTransactionError, match="never moves backwards"):
        store.commit(
            [
                f.NewFact(f.CompactionEntry(summary="earlier", throughEntryId=first[0].id)),
                f.NewFact(f.CompactionEntry(summary="back", throughEntryId=result)),
            ]
        )
    # the refused transaction's first cut (later than `answer`) was rolled back with it
    store.commit([f.NewFact(f.CompactionEntry(summary="up to the answer", throughEntryId=answer))])
    with pytest.raises(InvalidTransactionError, match="never moves backwards"):
        store.commit([f.NewFact(f.CompactionEntry(summary="back", throughEntryId=result))])
    store.commit(
        [f.NewFact(f.CompactionEntry(summary="same cut again", throughEntryId=answer))]
    )  # at the previous cut is fine


def test_compaction_settles_its_attempt_and_the_operation_can_finish(
    store: SessionStore,
) -> None:
    _, _, _, answer = _tool_run(store)
    compaction = Run(environment=store.header.environmentIdentity)
    operation_id = compaction.operation_id
    store.commit([f.compaction_started(operation_id)])
    store.commit(compaction.attempt())
    attempt_id = compaction.attempt_id
    with pytest.raises(InvalidTransactionError, match="pending stepAttempt"):
        store.commit(
            [f.NewFact(f.OperationFinished(operationId=operation_id, outcome="completed"))]
        )
    store.commit(
        [
            f.NewFact(
                f.CompactionEntry(
                    summary="ls was run",
                    throughEntryId=answer,
                    attemptId=attempt_id,
                    tokensBefore=1234,
                )
            ),
            f.usage(attempt_id=attempt_id, input_tokens=1234, output_tokens=40, cost=0.002),
        ]
    )
    store.commit([f.NewFact(f.OperationFinished(operationId=operation_id, outcome="completed"))])
    state = load_session(store.path)
    assert state.attempts[attempt_id].status == "settled"
    assert state.operations[operation_id].kind == "compaction"
    last = state.entries.last()
    assert last is not None and last.entry.tokensBefore == 1234  # type: ignore[union-attr]
    # a compaction is no run to continue
    with pytest.raises(InvalidTransactionError, match="continues a run"):
        store.commit([f.resume_started(new_id(), operation_id)])


def test_a_compaction_operation_names_no_input_entry() -> None:
    with pytest.raises(ValidationError, match="'compaction' has inputEntryId null"):
        OperationStarted(
            type="runStarted",
            operationId=new_id(),
            operationKind="compaction",
            inputEntryId=new_id(),
        )


def test_compaction_written_before_attempt_id_existed_still_loads(tmp_path: Path) -> None:
    fixtures = Path(__file__).parent.parent / "schemas" / "session" / "fixtures"
    state = load_session(fixtures / "compaction.jsonl")
    compactions = [e for e in state.entries.values() if e.entry.type == "compaction"]
    assert len(compactions) == 1
    assert compactions[0].entry.attemptId is None  # type: ignore[union-attr]
