"""A state keeps where its lines are and a digest of each, not their bytes (docs/session-format.md
§8.1): lines are read back from the state's own descriptor and checked, so a file
changed after the load is an error at the changed line, never content nobody validated.
"""

from __future__ import annotations

import gc
import os
import tracemalloc
from pathlib import Path

import pytest

from tiny_agent_nb.session import (
    HeaderInit,
    SessionCorruptError,
    SessionState,
    SessionStore,
    load_session,
    load_session_bytes,
)
from tiny_agent_nb.session._source import BLOCK

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
    return [line.removesuffix(b"\n") for line in state._tables.lines]


@pytest.fixture
def session(session_path: Path, header_init: HeaderInit) -> Path:
    with SessionStore.open(session_path, create=header_init) as store:
        _write_run(store, 100, result_bytes=1000)
    return session_path


def test_a_loaded_state_reads_back_the_files_lines_byte_for_byte(session: Path) -> None:
    state = load_session(session)
    assert _state_lines(state) == _file_lines(session)
    assert state.facts == load_session_bytes(session.read_bytes()).facts
    entry_id = list(state.entries)[57]
    assert state.entries[entry_id] == load_session_bytes(session.read_bytes()).entries[entry_id]


def test_a_writers_state_reads_back_its_lines_after_open_and_after_commits(
    session: Path,
) -> None:
    with SessionStore.open(session) as store:
        assert _state_lines(store.load()) == _file_lines(session)
        _write_run(store, 3)
        state = store.load()
        assert _state_lines(state) == _file_lines(session)
        assert state.facts == load_session_bytes(session.read_bytes()).facts


def _entry_on_line(state: SessionState, index: int) -> str:
    """An entry of transaction line `index` (0-based, the header not counted)."""
    return next(e for e, (line, _, _) in state._tables.entries.items() if line == index)


def _line_at(path: Path, offset: int) -> int:
    """The 1-based line number of the line holding byte `offset` of the file."""
    return path.read_bytes().count(b"\n", 0, offset) + 1


def _first_changed(state: SessionState, path: Path, offset: int) -> int:
    """The line a full iteration names for a change at `offset`: that very line, or for
    lines checked a block at a time (docs/session-format.md §8.1) the first line in its block."""
    if offset >= state._tables.lines._ends[state._tables.lines._covered]:
        return _line_at(path, offset)
    return max(2, _line_at(path, offset - offset % BLOCK))


def test_a_byte_changed_after_the_load_is_an_error_at_its_line(session: Path) -> None:
    state = load_session(session)
    index = 250
    entry_id = _entry_on_line(state, index)
    at = len(b"\n".join(session.read_bytes().split(b"\n")[: index + 1])) + 1
    at += _file_lines(session)[index].index(b"step") + 2
    fd = os.open(session, os.O_WRONLY)
    try:  # in place: same size, same inode; "step" becomes "stap"
        os.pwrite(fd, b"a", at)
    finally:
        os.close(fd)
    with pytest.raises(SessionCorruptError) as raised:
        state.entries[entry_id]
    assert raised.value.line == index + 2  # the header is line 1
    with pytest.raises(SessionCorruptError) as raised:
        _ = state.facts
    assert raised.value.line == _first_changed(state, session, at) <= index + 2
    assert state.entries[_entry_on_line(state, index - 200)]  # another block still reads


def test_a_file_truncated_after_the_load_is_an_error_at_the_first_line_cut(session: Path) -> None:
    state = load_session(session)
    lines = session.read_bytes().split(b"\n")
    keep = 300
    cut = len(b"\n".join(lines[: keep + 1])) + 1 + 10  # into line keep+2
    os.truncate(session, cut)
    with pytest.raises(SessionCorruptError) as raised:
        list(state._tables.lines)
    assert raised.value.line == _first_changed(state, session, cut) <= keep + 2
    with pytest.raises(SessionCorruptError) as raised:
        state.entries[_entry_on_line(state, keep + 6)]
    assert raised.value.line == keep + 8
    assert state.entries[_entry_on_line(state, keep - 200)]


def test_a_file_cut_just_before_a_lines_lf_is_an_error_at_the_next_line(session: Path) -> None:
    """A cut that leaves a line whole but drops its LF (and all after it): the scan's
    tail is that line, which passes its digest; the lines after it are still missing,
    an error at the first of them, never a shorter iteration."""
    state = load_session(session)
    keep = 300  # lines 0 .. keep - 1 and line keep without its LF stay
    cut = len(b"\n".join(session.read_bytes().split(b"\n")[: keep + 2]))
    os.truncate(session, cut)
    with pytest.raises(SessionCorruptError) as raised:
        list(state._tables.lines)
    lines = state._tables.lines
    if cut >= lines._ends[lines._covered]:  # read in full: line keep + 1 is missing
        assert raised.value.line == keep + 3  # the header is line 1
    else:  # checked by its block: the block's first line
        assert raised.value.line == _first_changed(state, session, cut) <= keep + 2


def test_a_state_outlives_its_writers_close_and_releases_no_lock(session: Path) -> None:
    with SessionStore.open(session) as store:
        _write_run(store, 2)
        state = store.load()
    expected, facts = _file_lines(session), load_session_bytes(session.read_bytes()).facts
    with SessionStore.open(session) as again:  # the state's descriptor holds no lock
        _write_run(again, 1)
    assert _state_lines(state) == expected
    assert state.facts == facts


def test_a_state_reads_the_file_it_loaded_after_it_is_replaced_or_deleted(
    session: Path, header_init: HeaderInit
) -> None:
    state = load_session(session)
    expected = _file_lines(session)
    other = session.with_name("other.jsonl")
    with SessionStore.open(other, create=header_init) as store:
        _write_run(store, 100)
    other.replace(session)  # what an editor's save does
    assert _state_lines(state) == expected
    session.unlink()
    assert _state_lines(state) == expected


def _descriptors_of(path: Path) -> int:
    """How many of this process's descriptors name `path`'s file."""
    inode = path.stat().st_ino
    count = 0
    for name in Path("/proc/self/fd").iterdir():
        try:
            if name.stat().st_ino == inode:
                count += 1
        except OSError:  # the listing's own descriptor, gone by now
            continue
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_a_closed_state_lets_go_of_its_descriptor_and_refuses_to_read(session: Path) -> None:
    """`close()` (or the `with` block's end) closes the state's descriptor at once, not
    when a finalizer runs; its lines are then refused with a clear error, never read
    through a descriptor number that may name another file by then."""
    gc.disable()  # no collection may close it for the state
    try:
        with load_session(session) as state:
            assert _descriptors_of(session) == 1
            copy = state.copy()  # holds the descriptor too
        assert _descriptors_of(session) == 1
        assert _state_lines(copy) == _file_lines(session)
        copy.close()
        assert _descriptors_of(session) == 0
        with pytest.raises(ValueError, match="was closed: load the session again"):
            state.facts  # noqa: B018
        assert state.last_seq == load_session_bytes(session.read_bytes()).last_seq
    finally:
        gc.enable()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_a_closed_writer_keeps_no_descriptor_but_those_its_states_hold(session: Path) -> None:
    """A writer's close lets go of its own state's descriptor: a state it handed out
    keeps reading the lines it loaded, and once that state is closed or freed, no
    descriptor of the file is left, though the store object is still referenced."""
    gc.disable()  # no collection may close it for the state
    try:
        store = SessionStore.open(session)
        _write_run(store, 1)
        state, other = store.load(), store.load()
        store.close()
        assert _descriptors_of(session) == 1  # the states', shared with the writer's own
        assert _state_lines(state) == _file_lines(session)
        state.close()
        assert _state_lines(other) == _file_lines(session)
        del other
        assert _descriptors_of(session) == 0
        assert store.closed
    finally:
        gc.enable()


@pytest.mark.slow  # a ~5 MB session, read twice
def test_load_session_holds_at_most_one_and_a_half_times_the_file(
    session_path: Path, header_init: HeaderInit
) -> None:
    with SessionStore.open(session_path, create=header_init) as store:
        _write_run(store, 1200, result_bytes=3000)  # ~5 MB
    size = session_path.stat().st_size
    assert size > 4_000_000
    gc.collect()
    tracemalloc.start()
    try:
        state = load_session(session_path)
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert state.transaction_count == 4802
    assert held <= 1.5 * size, held / size


def test_a_full_read_scans_lines_across_its_buffer_and_longer_than_it(
    session_path: Path, header_init: HeaderInit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full read's scan reads the file into one buffer of CHUNK bytes (register row
    "scan-map"): a line begun in one read ends in the next, a line longer than the buffer
    grows it, and the bytes after the last LF are the torn tail, as a read from memory
    finds them."""
    from tiny_agent_nb.session import _source  # noqa: PLC0415

    monkeypatch.setattr(_source, "CHUNK", BLOCK)
    with SessionStore.open(session_path, create=header_init) as store:
        _write_run(store, 3, result_bytes=BLOCK // 3)  # lines across a read's end
        _write_run(store, 1, result_bytes=5 * BLOCK // 2)  # longer than the buffer, twice
        _write_run(store, 2, result_bytes=BLOCK // 3)
    with session_path.open("ab") as f:
        f.write(b'{"torn')
    data = session_path.read_bytes()
    loaded, in_memory = load_session(session_path), load_session_bytes(data)
    assert loaded.torn_tail_bytes == in_memory.torn_tail_bytes == len(b'{"torn')
    assert _state_lines(loaded) == _state_lines(in_memory) == data.split(b"\n")[1:-1]
    assert len(loaded.entries) == len(in_memory.entries) == 3 + 6 * 2  # prompts, steps
