"""Whatever values a caller commits, the store writes only lines its own reader reads
back as they went in, and refuses the rest with InvalidTransactionError (nothing written,
state unchanged); a line the writer would refuse is corruption at that line on load."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiny_agent_nb.render import when
from tiny_agent_nb.session import (
    MAX_JSON_DEPTH,
    HeaderInit,
    InvalidTransactionError,
    SessionCorruptError,
    SessionStore,
    json_depth,
    load_session,
)
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.session._records import MAX_EPOCH_MS
from tiny_agent_nb.timeline import build_timeline

from helpers.scenario import READ_FILE, Run

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


def _new_store(path: Path) -> SessionStore:
    """A new session file at `path`, open for commits."""
    init = HeaderInit(cwd="/w", provider="p", model="m", environment_identity="/w")
    return SessionStore.open(path, create=init)


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
        store.commit([f.NewFact(f.AbortRequested(operationId=run.operation_id, reason=text))])
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


@settings(max_examples=10)
@given(arguments=_json_at_depth(MAX_JSON_DEPTH))
def test_arguments_nested_right_up_to_the_limit_come_back_from_the_file_as_they_went_in(
    tmp_path_factory: pytest.TempPathFactory, arguments: dict[str, Any]
) -> None:
    path = tmp_path_factory.mktemp("deep") / "s.jsonl"
    with _new_store(path) as store:
        run = _started(store, arguments)
        intent = run.intent("call_1", READ_FILE, arguments)
        store.commit([intent])
    state = load_session(path)
    assert state.tool_intents[str(intent.id)].arguments == arguments
    entry = state.entries[state.attempts[str(run.attempt_id)].entry_id or ""]
    assert entry.entry.message.toolCalls[0].arguments == arguments  # type: ignore[union-attr]


@settings(max_examples=10)
@given(arguments=_json_at_depth(MAX_JSON_DEPTH + 1))
def test_arguments_one_level_deeper_are_refused(
    tmp_path_factory: pytest.TempPathFactory, arguments: dict[str, Any]
) -> None:
    path = tmp_path_factory.mktemp("deep") / "s.jsonl"
    with _new_store(path) as store:
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
    with pytest.raises(InvalidTransactionError, match="createdAt"):
        SessionStore.open(torn, create=header_init, clock=lambda: 10**20)
    assert torn.read_bytes() == b'{"kind":"hea'
