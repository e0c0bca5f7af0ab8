"""Whatever a path names and whatever bytes a file holds, the store neither damages
somebody else's file nor hangs: only an empty file or a torn session header is ever
overwritten, and only a regular file is ever read or written."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiny_agent_nb.render import when
from tiny_agent_nb.session import (
    MAX_EPOCH_MS,
    MAX_JSON_DEPTH,
    HeaderInit,
    InvalidTransactionError,
    NotASessionError,
    SessionCorruptError,
    SessionStore,
    json_depth,
    load_session,
)
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.session._framing import HEADER_START, is_torn_header
from tiny_agent_nb.timeline import build_timeline

from scenario import READ_FILE, Run

OLD_NS = 1_000_000_000 * 1_000_000_000  # 2001-09-09: any write would move mtime to now


@contextmanager
def untouched(path: Path) -> Iterator[None]:
    """Fails unless the file's bytes and mtime are the same after the block."""
    os.utime(path, ns=(OLD_NS, OLD_NS))
    before = path.read_bytes()
    yield
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == OLD_NS


# ---------------------------------------------------------------- torn header vs other files

# What an unrelated file without a final LF can hold: none of it is ever overwritten.
NOT_A_TORN_HEADER = {
    "settings-json": b'{"theme": "dark", "fontSize": 14}',
    "compact-json": b'{"kind":"note","text":"keep me"}',
    "spaced-header": b'{"kind": "header", "version": 2}',
    "other-version": b'{"kind":"header","version":3,"id":"x"',
    "kind-headers": b'{"kind":"headers"',
    "text": b"remember the milk",
    "one-space": b" ",
    "binary": b"\x00\x01\xff",
    "brace-then-text": b"{hello",
}

# What a writer that died while creating a session can have left.
TORN_HEADERS = {
    "empty": b"",
    "one-brace": b"{",
    "inside-kind": b'{"kind":"hea',
    "kind-done": b'{"kind":"header"',
    "inside-id": HEADER_START + b'"id":"019',
    "whole-line-no-lf": HEADER_START
    + b'"id":"01a22960-953b-7b8c-9834-3e442e43865b","createdAt":1,"cwd":"/w","provider":"p",'
    b'"model":"m","environmentIdentity":"/w"}',
}


@pytest.mark.parametrize("content", NOT_A_TORN_HEADER.values(), ids=NOT_A_TORN_HEADER.keys())
def test_create_refuses_a_file_without_lf_that_is_no_torn_header(
    tmp_path: Path, header_init: HeaderInit, content: bytes
) -> None:
    settings = tmp_path / "settings.json"
    settings.write_bytes(content)
    with untouched(settings), pytest.raises(NotASessionError) as info:
        SessionStore.open(settings, create=header_init)
    assert "not a tiny-agent-nb session" in str(info.value)
    # The refusal released the path: a later open of a real session there would work.
    settings.unlink()
    SessionStore.open(settings, create=header_init).close()


@pytest.mark.parametrize("content", TORN_HEADERS.values(), ids=TORN_HEADERS.keys())
def test_create_repairs_an_empty_file_or_a_torn_header(
    session_path: Path, header_init: HeaderInit, content: bytes
) -> None:
    session_path.write_bytes(content)
    with SessionStore.open(session_path, create=header_init) as store:
        assert store.created
        header = store.header
    assert session_path.read_bytes() == header.model_dump_json().encode() + b"\n"
    assert load_session(session_path).header == header


def test_header_start_is_what_the_writer_writes_first(
    session_path: Path, header_init: HeaderInit
) -> None:
    with SessionStore.open(session_path, create=header_init):
        pass
    written = session_path.read_bytes()
    assert written.startswith(HEADER_START)
    # Every cut of a real header line (the LF not yet written) is a torn header.
    line = written.rstrip(b"\n")
    assert all(is_torn_header(line[:cut]) for cut in range(len(line) + 1))
    assert not is_torn_header(written)


# ---------------------------------------------------------------- regular files only


def test_create_refuses_a_directory(tmp_path: Path, header_init: HeaderInit) -> None:
    directory = tmp_path / "notebook.agent.jsonl"
    directory.mkdir()
    with pytest.raises(NotASessionError, match="directory"):
        SessionStore.open(directory, create=header_init)
    with pytest.raises(NotASessionError, match="directory"):
        load_session(directory)
    assert list(directory.iterdir()) == []


def test_create_refuses_dev_null(header_init: HeaderInit) -> None:
    # /dev/null would swallow every commit: the session would look fine and keep nothing.
    with pytest.raises(NotASessionError, match="character device"):
        SessionStore.open("/dev/null", create=header_init)
    with pytest.raises(NotASessionError, match="character device"):
        load_session("/dev/null")


def test_create_refuses_a_fifo_and_writes_nothing_into_it(
    tmp_path: Path, header_init: HeaderInit
) -> None:
    fifo = tmp_path / "notebook.agent.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(NotASessionError, match="FIFO"):
        SessionStore.open(fifo, create=header_init)
    # Nothing is waiting in the pipe: a non-blocking read finds it empty, not a header.
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert os.read(fd, 4096) == b""
    finally:
        os.close(fd)


# On the base code these readers blocked forever (a FIFO with no writer) or read until
# memory ran out (/dev/zero), so they run in a child with a deadline and a memory cap.
LOAD_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from tiny_agent_nb.session import NotASessionError, SessionStore, load_session
for open_it in (load_session, SessionStore.open):
    try:
        open_it(sys.argv[1])
    except NotASessionError as exc:
        print(exc.reason)
    else:
        print("opened")
"""


def _load_in_child(path: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", LOAD_CHILD, path],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


def test_reading_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "session.jsonl"
    os.mkfifo(fifo)
    reason = "it is a FIFO (named pipe); a session is a regular file"
    assert _load_in_child(str(fifo)) == [reason] * 2


def test_reading_dev_zero_is_refused_without_reading_it() -> None:
    reason = "it is a character device; a session is a regular file"
    assert _load_in_child("/dev/zero") == [reason] * 2


# ---------------------------------------------------------------- values a commit may hold


def nested(depth: int, leaf: object = "x") -> dict[str, Any]:
    """Tool arguments whose json_depth is `depth` (the arguments object is level 1)."""
    value: object = leaf
    for level in range(depth - 1):
        value = [value] if level % 2 else {"k": value}
    return {"v": value}


def _cycle() -> dict[str, Any]:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    return looped


# Each bad value, how the base code broke on it, and what the refusal says.
DEEP = "nest more than 64 levels deep"
NOT_A_NUMBER = "is not JSON (NaN and infinities are not numbers)"
BAD_ARGUMENTS: dict[str, tuple[Callable[[], dict[str, Any]], str]] = {
    "depth-65": (lambda: nested(MAX_JSON_DEPTH + 1), DEEP),  # written; unreadable from ~200
    "depth-300": (lambda: nested(300), DEEP),  # the serializer's recursion guard raised
    "depth-5000": (lambda: nested(5000), DEEP),  # deeper than the interpreter's stack
    "cycle": (_cycle, DEEP),
    "nan": (lambda: {"x": math.nan}, NOT_A_NUMBER),  # written as null: the file lied
    "infinity": (lambda: {"x": -math.inf}, NOT_A_NUMBER),
    "huge-int": (lambda: {"x": 10**5000}, "more than 640 digits"),  # unreadable on load
    "641-digit-int": (lambda: {"x": -(10**640)}, "more than 640 digits"),
    "lone-surrogate": (lambda: {"path": "a\ud800b"}, "lone surrogate (U+D800)"),
    "surrogate-key": (lambda: {"\udc80": 1}, "lone surrogate (U+DC80)"),  # written as U+FFFD
    "tuple": (lambda: {"x": (1, 2)}, "a Python tuple is not a JSON value"),  # came back a list
    "set": (lambda: {"x": {1, 2}}, "a Python set is not a JSON value"),
    "bytes": (lambda: {"x": b"raw"}, "a Python bytes is not a JSON value"),
    "object": (lambda: {"x": object()}, "a Python object is not a JSON value"),
}


def _started(store: SessionStore, arguments: dict[str, Any] | None = None) -> Run:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("go"))
    store.commit(run.attempt())
    if arguments is not None:
        store.commit(run.answer(None, [("call_1", "read_file", arguments)]))
    return run


@contextmanager
def refused_and_unchanged(store: SessionStore, path: Path, *reason: str) -> Iterator[None]:
    """The block must raise InvalidTransactionError, leaving file and state as they were."""
    before, summary = path.read_bytes(), store.load().summary()
    with pytest.raises(InvalidTransactionError, match="nothing written") as info:
        yield
    assert all(part in info.value.reason for part in reason), info.value.reason
    assert path.read_bytes() == before
    assert store.load().summary() == summary
    assert load_session(path).summary() == summary


@pytest.mark.parametrize(("make", "reason"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_a_tool_call_with_arguments_no_reader_could_read_back_is_refused(
    store: SessionStore, session_path: Path, make: Callable[[], dict[str, Any]], reason: str
) -> None:
    run = _started(store)
    with refused_and_unchanged(store, session_path, "tool call 'call_1' arguments: ", reason):
        store.commit(run.answer(None, [("call_1", "read_file", make())]))
    # Not wedged: the same attempt still takes a good answer, and the file loads.
    store.commit(run.answer("fine"))
    assert load_session(session_path).last_seq == store.load().last_seq == 5


@pytest.mark.parametrize(("make", "reason"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_a_tool_intent_with_such_arguments_is_refused_before_it_is_built(
    store: SessionStore, session_path: Path, make: Callable[[], dict[str, Any]], reason: str
) -> None:
    run = _started(store, {"path": "README.md"})
    with refused_and_unchanged(store, session_path, "toolStarted arguments: ", reason):
        store.commit([run.intent("call_1", READ_FILE, make())])


@pytest.mark.parametrize(
    "text",
    ["a\ud800b", "\udfff", "ok then \udc80"],
    ids=["high", "low-alone", "surrogate-escape"],
)
def test_a_lone_surrogate_anywhere_in_a_fact_is_refused(
    store: SessionStore, session_path: Path, text: str
) -> None:
    run = _started(store)
    with refused_and_unchanged(store, session_path, "cannot be written as JSON text"):
        store.commit(run.answer(text))
    with refused_and_unchanged(store, session_path, "cannot be written as JSON text"):
        store.commit([f.abort_requested(run.operation_id, reason=text)])
    store.commit(run.answer("fine"))


def _json_at_depth(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with json_depth exactly `depth`: a random spine of objects and arrays,
    with random scalar siblings at every level."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(10**639), max_value=10**639)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=8)
    )
    keys = st.text(max_size=4)

    @st.composite
    def spine(draw: st.DrawFn) -> dict[str, Any]:
        value: Any = draw(
            st.lists(scalars, max_size=3) | st.dictionaries(keys, scalars, max_size=3)
        )
        for level in range(depth - 1):
            siblings = draw(st.lists(scalars, max_size=2))
            if level < depth - 2 and draw(st.booleans()):
                at = draw(st.integers(min_value=0, max_value=len(siblings)))
                value = [*siblings[:at], value, *siblings[at:]]
            else:
                key = draw(keys)
                value = {**{f"{key}{i}": s for i, s in enumerate(siblings)}, key: value}
        assert isinstance(value, dict) and json_depth(value) == depth
        return value

    return spine()


@settings(max_examples=25)
@given(arguments=_json_at_depth(MAX_JSON_DEPTH))
def test_arguments_nested_right_up_to_the_limit_come_back_from_the_file_as_they_went_in(
    tmp_path_factory: pytest.TempPathFactory, arguments: dict[str, Any]
) -> None:
    path = tmp_path_factory.mktemp("deep") / "s.jsonl"
    init = HeaderInit(cwd="/w", provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        run = _started(store, arguments)
        intent = run.intent("call_1", READ_FILE, arguments)
        store.commit([intent])
    state = load_session(path)
    assert state.tool_intents[str(intent.id)].arguments == arguments
    entry = state.entries[state.attempts[str(run.attempt_id)].entry_id or ""]
    assert entry.entry.message.toolCalls[0].arguments == arguments  # type: ignore[union-attr]


@settings(max_examples=25)
@given(arguments=_json_at_depth(MAX_JSON_DEPTH + 1))
def test_arguments_one_level_deeper_are_refused(
    tmp_path_factory: pytest.TempPathFactory, arguments: dict[str, Any]
) -> None:
    path = tmp_path_factory.mktemp("deep") / "s.jsonl"
    init = HeaderInit(cwd="/w", provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        run = _started(store)
        with refused_and_unchanged(store, path):
            store.commit(run.answer(None, [("call_1", "read_file", arguments)]))


def _line_with_arguments(store: SessionStore, path: Path, raw_arguments: bytes) -> int:
    """Commit a tool call whose arguments are {"v":0}, then swap in `raw_arguments` on disk
    (the damage a hand edit or another writer could do). Returns the line number."""
    run = _started(store, {"v": 0})
    store.close()
    lines = path.read_bytes().split(b"\n")
    assert b'"arguments":{"v":0}' in lines[-2]
    lines[-2] = lines[-2].replace(b'{"v":0}', raw_arguments)
    path.write_bytes(b"\n".join(lines))
    assert run.attempt_id
    return len(lines) - 1


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"v":' * 65 + b"0" + b"}" * 65, "nest more than 64 levels deep"),
        (b'{"v":' * 64 + b"0" + b"}" * 64, None),
        (b'{"v":1e400}', "the number inf is not JSON"),
        (b'{"v":' + b"9" * 641 + b"}", "more than 640 digits"),
        (b'{"v":' * 250 + b"0" + b"}" * 250, "recursion limit"),
    ],
    ids=["depth-65", "depth-64", "overflowing-float", "641-digits", "depth-250"],
)
def test_a_line_with_arguments_the_writer_would_refuse_is_corrupt_at_that_line(
    store: SessionStore, session_path: Path, raw: bytes, reason: str | None
) -> None:
    line = _line_with_arguments(store, session_path, raw)
    if reason is None:  # right at the limit: loads
        load_session(session_path)
        return
    with pytest.raises(SessionCorruptError) as info:
        load_session(session_path)
    assert info.value.line == line
    assert all(part in info.value.reason for part in reason), info.value.reason


@pytest.mark.parametrize(
    ("raw", "reason"),
    [(b"\\ud800", "hex escape"), (b"\xed\xa0\x80", "invalid unicode code point")],
    ids=["escaped-lone-surrogate", "surrogate-as-utf8-bytes"],
)
def test_a_line_holding_no_unicode_text_is_corrupt_at_that_line(
    store: SessionStore, session_path: Path, raw: bytes, reason: str
) -> None:
    _started(store)
    store.commit([f.user_message("MARKER")])
    store.close()
    data = session_path.read_bytes()
    session_path.write_bytes(data.replace(b"MARKER", raw))
    with pytest.raises(SessionCorruptError) as info:
        load_session(session_path)
    assert info.value.line == data.count(b"\n")
    assert reason in info.value.reason


# ---------------------------------------------------------------- timestamps


def test_at_is_bounded_to_times_a_renderer_can_show(
    session_path: Path, header_init: HeaderInit
) -> None:
    now = [MAX_EPOCH_MS]
    with SessionStore.open(session_path, create=header_init, clock=lambda: now[0]) as store:
        run = _started(store)
        assert when(store.load().operations[run.operation_id].started_at or 0) == (
            "9999-12-31 23:59:59 UTC"
        )
        for bad in (MAX_EPOCH_MS + 1, 10**20, -1):
            now[0] = bad
            with refused_and_unchanged(store, session_path, "at: Input should be"):
                store.commit(run.answer("late"))
    state = load_session(session_path)
    assert state.header.createdAt == MAX_EPOCH_MS
    build_timeline(state)  # renders every time the reader accepts


@pytest.mark.parametrize("at", [MAX_EPOCH_MS + 1, 10**20, -1])
def test_a_line_whose_at_is_no_time_is_corrupt_at_that_line(
    store: SessionStore, session_path: Path, at: int
) -> None:
    _started(store)
    store.close()
    data = session_path.read_bytes()
    lines = data.split(b"\n")
    lines[-2] = re.sub(rb'"at":\d+', b'"at":%d' % at, lines[-2])
    session_path.write_bytes(b"\n".join(lines))
    with pytest.raises(SessionCorruptError) as info:
        load_session(session_path)
    assert info.value.line == len(lines) - 1
    assert info.value.reason.startswith("at:") or ".at:" in info.value.reason


@pytest.mark.parametrize("created_at", [MAX_EPOCH_MS + 1, 10**20])
def test_a_header_whose_created_at_is_no_time_is_corrupt_at_line_1(
    session_path: Path, header_init: HeaderInit, created_at: int
) -> None:
    SessionStore.open(session_path, create=header_init).close()
    data = session_path.read_bytes()
    session_path.write_bytes(re.sub(rb'"createdAt":\d+', b'"createdAt":%d' % created_at, data))
    with pytest.raises(SessionCorruptError) as info:
        load_session(session_path)
    assert info.value.line == 1


def test_a_clock_out_of_range_creates_no_header(tmp_path: Path, header_init: HeaderInit) -> None:
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b'{"kind":"hea')
    with untouched(torn), pytest.raises(InvalidTransactionError, match="createdAt"):
        SessionStore.open(torn, create=header_init, clock=lambda: 10**20)
