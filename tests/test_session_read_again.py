"""A state keeps the facts it validated; what needs the bytes of its lines (a fork's copy,
`SessionState.facts`) reads the file again and checks them against the size and SHA-256 of
what was loaded (docs/session-format.md §8.1): a file changed after the load is an error,
never content nobody validated.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tiny_agent_nb.session import (
    HeaderInit,
    SessionError,
    SessionState,
    SessionStore,
    load_session,
    load_session_bytes,
)

from helpers.scenario import READ_FILE, Run


def _write_run(store: SessionStore, steps: int, result_bytes: int = 100) -> None:
    """`steps` tool steps: attempt, answer with a call, intent, result."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("go"))
    for i in range(steps):
        store.commit(run.attempt())
        store.commit(run.answer(f"step {i}", [(f"c{i}", "read_file", {"path": f"f{i}"})]))
        intent = run.intent(f"c{i}", READ_FILE, {"path": f"f{i}"})
        store.commit([intent])
        store.commit([run.result(intent, f"{i}:" + "x" * result_bytes)])
    store.commit(run.finish())


def _file_lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[1:-1]


def _state_lines(state: SessionState) -> list[bytes]:
    return [line.removesuffix(b"\n") for line in state.transaction_bytes()]


@pytest.fixture
def session(session_path: Path, header_init: HeaderInit) -> Path:
    with SessionStore.open(session_path, create=header_init) as store:
        _write_run(store, 100, result_bytes=1000)
    return session_path


def test_a_loaded_state_reads_the_files_lines_again_byte_for_byte(session: Path) -> None:
    state = load_session(session)
    assert _state_lines(state) == _file_lines(session)
    assert state.facts == load_session_bytes(session.read_bytes()).facts
    entry_id = list(state.entries)[57]
    assert state.entries[entry_id] == load_session_bytes(session.read_bytes()).entries[entry_id]


def test_a_writers_state_reads_its_lines_after_open_and_after_commits(session: Path) -> None:
    with SessionStore.open(session) as store:
        assert _state_lines(store.load()) == _file_lines(session)
        _write_run(store, 3)
        state = store.load()
        assert _state_lines(state) == _file_lines(session)
        assert state.facts == load_session_bytes(session.read_bytes()).facts


def test_a_byte_changed_after_the_load_is_an_error_and_the_entries_stay(session: Path) -> None:
    state = load_session(session)
    entry_id = list(state.entries)[100]
    entry = state.entries[entry_id]
    at = session.read_bytes().index(b"step 50") + 2
    fd = os.open(session, os.O_WRONLY)
    try:  # in place: same size, same inode; "step" becomes "stap"
        os.pwrite(fd, b"a", at)
    finally:
        os.close(fd)
    with pytest.raises(SessionError, match="changed on disk after it was read"):
        _ = state.facts
    with pytest.raises(SessionError, match="changed on disk after it was read"):
        list(state.transaction_bytes(3))
    assert state.entries[entry_id] == entry  # what was validated is kept, not read again


@pytest.mark.parametrize("cut", [10, -1])
def test_a_file_truncated_after_the_load_is_an_error(session: Path, cut: int) -> None:
    """Cut into a line, or only a line's LF (the line itself whole)."""
    state = load_session(session)
    os.truncate(session, session.stat().st_size + cut if cut < 0 else 300 * cut)
    with pytest.raises(SessionError, match="changed on disk after it was read"):
        list(state.transaction_bytes())


def test_lines_appended_after_the_load_are_not_the_states(session: Path) -> None:
    state = load_session(session)
    expected = _file_lines(session)
    with SessionStore.open(session) as store:  # the state holds no lock, nor descriptor
        _write_run(store, 1)
    assert _state_lines(state) == expected
    assert state.transaction_count == len(expected)


def test_a_state_outlives_its_writers_close(session: Path) -> None:
    with SessionStore.open(session) as store:
        _write_run(store, 2)
        state = store.load()
    assert _state_lines(state) == _file_lines(session)


def test_a_file_replaced_after_the_load_is_an_error(session: Path, header_init: HeaderInit) -> None:
    state = load_session(session)
    other = session.with_name("other.jsonl")
    with SessionStore.open(other, create=header_init) as store:
        _write_run(store, 100)
    other.replace(session)  # what an editor's save does
    with pytest.raises(SessionError, match="changed on disk after it was read"):
        _ = state.facts
    assert len(state.entries) == 1 + 2 * 100  # the prompt, an answer and a result per step
