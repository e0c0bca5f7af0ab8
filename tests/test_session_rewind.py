"""A rewind's facts (docs/session-format.md §2.3, §4): the head it moves, the path the
conversation follows from it, and the `fileRestore` records it commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_agent_nb.session import InvalidTransactionError, SessionState, SessionStore, load_session
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.session._ids import new_id

from helpers.scenario import complete_run

DIGEST = "sha256:" + "ab" * 32


def rewind_started(rewind_id: str, operation_id: str) -> f.NewFact:
    return f.NewFact(
        f.OperationStarted(
            operationId=rewind_id,
            operationKind="rewind",
            inputEntryId=None,
            rewindsOperationId=operation_id,
        )
    )


def rewind(store: SessionStore, operation_id: str, *restores: f.FileRestore) -> str:
    rewind_id = new_id()
    store.commit([rewind_started(rewind_id, operation_id)])
    for restore in restores:
        store.commit([f.NewFact(restore)])
    store.commit([f.NewFact(f.OperationFinished(operationId=rewind_id, outcome="completed"))])
    return rewind_id


def prompts(state: SessionState) -> list[str]:
    texts = []
    for entry_id in state.entry_path():
        message = state.entries[entry_id].entry.message
        if message.role == "user":
            texts.append(message.content)
    return texts


def test_a_rewind_moves_the_head_back_and_an_undo_moves_it_forward(store: SessionStore) -> None:
    runs = [complete_run(store, f"run {n}") for n in (1, 2, 3)]
    first = rewind(store, runs[1].operation_id)
    state = store.load()
    assert prompts(state) == ["run 1"]
    assert [op.id for op in state.operation_path()] == [runs[0].operation_id]
    complete_run(store, "run 4")
    assert prompts(store.load()) == ["run 1", "run 4"]
    rewind(store, first)  # undo: back to the head the rewind left
    state = store.load()
    assert prompts(state) == ["run 1", "run 2", "run 3"]
    assert [op.id for op in state.operation_path()] == [r.operation_id for r in runs]
    # The file says the same to a reader that loads it again.
    assert load_session(store.path).entry_path() == state.entry_path()


def test_a_rewind_to_the_first_run_leaves_no_entry_on_the_path(store: SessionStore) -> None:
    run = complete_run(store)
    rewind(store, run.operation_id)
    assert store.load().entry_path() == []
    complete_run(store, "again")
    assert prompts(store.load()) == ["again"]


def test_a_file_restore_names_an_open_rewind(store: SessionStore) -> None:
    run = complete_run(store)
    restore = f.FileRestore(
        operationId=run.operation_id,
        path="a.txt",
        from_=DIGEST,
        fromMode=0o644,
        to=None,
        toMode=None,
    )
    with pytest.raises(InvalidTransactionError, match="already completed"):
        store.commit([f.NewFact(restore)])
    rewind_id = new_id()
    store.commit([rewind_started(rewind_id, run.operation_id)])
    store.commit([f.NewFact(restore.model_copy(update={"operationId": rewind_id}))])
    line = Path(store.path).read_text().splitlines()[-1]
    assert '"from":"' + DIGEST in line and '"to":null' in line
    with pytest.raises(InvalidTransactionError, match="no model request"):
        store.commit(
            [
                f.NewFact(
                    f.StepAttempt(
                        operationId=rewind_id,
                        step=1,
                        attempt=1,
                        provider="p",
                        model="m",
                        configurationDigest=DIGEST,
                    )
                )
            ]
        )


def test_a_rewind_names_an_earlier_operation(store: SessionStore) -> None:
    with pytest.raises(InvalidTransactionError, match="is no operation"):
        store.commit([rewind_started(new_id(), new_id())])


def test_a_request_measured_before_a_rewind_measures_nothing_after_it(
    store: SessionStore,
) -> None:
    runs = [complete_run(store, f"run {n}") for n in (1, 2)]
    assert store.last_input_tokens() == 100
    rewind(store, runs[1].operation_id)
    assert store.last_input_tokens() is None  # that context is gone
    complete_run(store, "run 3")
    assert store.last_input_tokens() == 100
