"""Snapshots (docs/spec.md §14): a load through one gives exactly the state of a full read,
and a snapshot that is not both authentic and over these very bytes changes nothing.

The reference is always a full read of the same bytes (`load_session_bytes`, which never
looks for a snapshot): the same state, table by table and in order, or the same error at
the same line. Hostile snapshots are made *authentic-looking but wrong* (tables altered
before writing), so a reader that believed one would give a different state: the
equality with the full read is what shows it was refused.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import fields
from itertools import accumulate, chain, repeat
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.session import (
    HeaderInit,
    SessionError,
    SessionState,
    SessionStore,
    ToolIdentity,
    _source,
    load_session,
    load_session_bytes,
)
from tiny_agent_nb.session import _snapshot_columns as columns
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.session._snapshot import (
    SNAPSHOT_TAIL,
    _draft,
    _mac,
    snapshot_path,
    write_snapshot,
)
from tiny_agent_nb.session._snapshot_key import KEY_NAME, read_key, state_dir

from helpers.scenario import READ_FILE, Run, complete_run

FIXTURES = Path(__file__).resolve().parent.parent / "schemas" / "session" / "fixtures"
TIME = ToolIdentity(name="get_time", version="2", source="mcp:clock")


def _tables(state: SessionState) -> dict[str, Any]:
    """Every table of the state, in order (a committed line keeps its LF: not compared)."""
    t = state._tables
    out: dict[str, Any] = {
        f.name: list(getattr(t, f.name).items())
        for f in fields(t)
        if not f.name.startswith("_") and isinstance(getattr(t, f.name), dict)
    }
    out["lines"] = [line.removesuffix(b"\n") for line in t.lines]
    out["totals"] = t.totals.summary(), t.totals.priced, t.totals.unpriced
    out["scalars"] = t.last_seq, t.open_operation_id, t.last_cut, t.system_prompt
    out["system prompt"] = state.system_prompt
    out["usage views"] = [(k, u, u.model_fields_set) for k, u in state.usage.items()]
    out["entries read"] = [state.entries[k] for k in state.entries], state.entries.last()
    out["facts"] = state.facts
    out["header"] = state.header, state.torn_tail_bytes, state.summary()
    return out


def _outcome(read: Any) -> Any:
    """A load's result as something comparable: the tables, or the error and its line."""
    try:
        return _tables(read())
    except SessionError as exc:
        return type(exc).__name__, getattr(exc, "line", None), str(exc)


def _same_as_full_read(path: Path) -> Any:
    got = _outcome(lambda: load_session(path))
    assert got == _outcome(lambda: load_session_bytes(path.read_bytes(), str(path)))
    return got


def _snapshot_of(path: Path, data: bytes, alter: bool = False) -> None:
    """An authentic snapshot of the session `data` (a prefix of the file at `path`),
    its usage totals off by one token when `alter`: believed, it would show."""
    state = load_session_bytes(data, str(path))
    if alter:
        state._tables.totals.input_tokens += 1
    assert write_snapshot(path, state.header_line, state._tables, sync=False)


def _used(path: Path) -> bool:
    """Whether a load believes the snapshot: it was written altered (`_snapshot_of`)."""
    loaded = load_session(path).totals.input_tokens
    full = load_session_bytes(path.read_bytes()).totals.input_tokens
    return loaded == full + 1


def _long_run(store: SessionStore, steps: int) -> None:
    """A run of `steps` tool steps with everything the tables hold: a failed attempt, a
    tool's usage, an MCP tool, two calls in one answer, a compaction, learned context
    windows, kernels and a kernel notice, an open end."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit([_kernel(pid=100)])
    store.commit([f.context_window("http://127.0.0.1:8080/v1", "m", 32_768, "listing")])
    store.commit(run.start("go"))
    for i in range(steps):
        if i in (0, steps // 2):  # what the model is told, and later told anew
            store.commit([f.system_prompt(run.operation_id, f"Be brief ({i}).")])
        if i == 10:
            opened = store.commit([_kernel(pid=200, notebook=None)])[0]
            store.commit([f.kernel_notice(opened.id, "[Kernel restarted] ...")])
        store.commit(run.attempt())
        if i % 7 == 3:
            failed = f.attempt_failed(
                run.attempt_id or "", kind="http", message="429", retryable=True, status=429
            )
            learned = f.context_window(
                "http://127.0.0.1:8080/v1", "m", 4096 + i, "refusal", attempt_id=run.attempt_id
            )
            store.commit([failed, learned])
            store.commit(run.attempt(attempt=2))
        calls = [(f"c{i}a", "read_file", {"path": f"f{i}", "n": [i, 1.5, None]})]
        if i % 5 == 0:
            calls.append((f"c{i}b", "clock__get_time", {}))
        store.commit(run.answer(f"step {i}", calls, cost=None if i % 3 else 0.25))
        first = run.intent(f"c{i}a", READ_FILE, calls[0][2])
        store.commit([first])
        store.commit([run.result(first, "x" * (i % 50), "completed" if i % 4 else "error")])
        if len(calls) > 1:
            second = run.intent(f"c{i}b", TIME, {})
            store.commit([second])
            usage = f.usage(tool_started_id=second.id, input_tokens=i, output_tokens=1, cost=0.5)
            store.commit([run.result(second, "noon"), usage])
    store.commit(run.attempt())
    store.commit(run.answer("summary"))
    state = store.load()
    early = list(state.entries)[: len(state.entries) // 2]
    through = next(e for e in reversed(early) if e not in state._tables.open_call_entries)
    store.commit([f.compaction("earlier work", through)])
    store.commit(run.attempt())  # left pending: the run stays open
    assert len(store.load()._tables.lines) >= SNAPSHOT_TAIL


def _kernel(*, pid: int, notebook: str | None = "analysis.ipynb") -> Any:
    return f.kernel_opened(
        pid=pid, host="laptop", started_at=1_000 * pid, kernel_id="k-1", notebook=notebook
    )


@pytest.fixture
def long_session(session_path: Path, header_init: HeaderInit) -> Path:
    with SessionStore.open(session_path, create=header_init) as store:
        _long_run(store, 60)
    return session_path


# ---------------------------------------------------------------- the same state


def _fixture_prefixes() -> list[tuple[str, int]]:
    """(fixture, k) for every fixture whose header and first k transactions load."""
    cases = []
    for path in sorted(FIXTURES.glob("*.jsonl")):
        lines = path.read_bytes().splitlines(keepends=True)
        for k in range(len(lines)):
            try:
                load_session_bytes(b"".join(lines[: k + 1]))
            except SessionError:
                break
            cases.append((path.name, k))
    return cases


@pytest.mark.parametrize(("name", "covered"), _fixture_prefixes())
def test_a_snapshot_of_any_prefix_of_any_fixture_loads_as_a_full_read(
    tmp_path: Path, name: str, covered: int
) -> None:
    path = tmp_path / name
    shutil.copy(FIXTURES / name, path)
    data = path.read_bytes()
    _snapshot_of(path, b"".join(data.splitlines(keepends=True)[: covered + 1]))
    _same_as_full_read(path)  # the lines after the snapshot reduced as in a full read


def test_a_long_session_resumes_from_the_snapshot_its_writer_left(
    long_session: Path, header_init: HeaderInit
) -> None:
    snapshot = snapshot_path(long_session)
    assert stat.S_IMODE(snapshot.stat().st_mode) == 0o600
    assert load_session(long_session).snapshot_lines == load_session(long_session).transaction_count
    before = _same_as_full_read(long_session)
    with SessionStore.open(long_session) as store:  # more commits: a tail past the snapshot
        assert _tables(store.load()) == before
        _long_run_after_open(store)
    _same_as_full_read(long_session)
    key = state_dir() / KEY_NAME
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700


def _long_run_after_open(store: SessionStore) -> None:
    state = store.load()
    pending = next(a for a in state.attempts.values() if a.status == "pending")
    store.commit(
        [f.attempt_failed(pending.id, kind="interrupted", message="died", retryable=False)]
    )
    store.commit([f.operation_finished(pending.operation_id, "interrupted")])
    complete_run(store, "again")


def test_the_writer_refreshes_a_snapshot_left_behind_by_a_long_tail(
    long_session: Path,
) -> None:
    with SessionStore.open(long_session) as store:
        covered = load_session(long_session).snapshot_lines
        _long_run_after_open(store)
        for _ in range(SNAPSHOT_TAIL // 8 + 1):
            complete_run(store)
    assert load_session(long_session).snapshot_lines > covered + SNAPSHOT_TAIL
    _same_as_full_read(long_session)


def test_an_authentic_snapshot_is_believed_for_the_lines_it_covers(long_session: Path) -> None:
    _snapshot_of(long_session, long_session.read_bytes(), alter=True)
    assert _used(long_session)  # the check the hostile cases below rely on


def test_a_writer_removes_the_snapshot_drafts_a_killed_writer_left(
    session_path: Path, header_init: HeaderInit
) -> None:
    """A writer killed mid-snapshot leaves its draft (as large as a snapshot); the next
    writer removes it as it opens. A reader never writes; nothing else is touched."""
    with SessionStore.open(session_path, create=header_init) as store:
        complete_run(store)
    target = snapshot_path(session_path)
    drafts = [_draft(target) for _ in range(2)]
    for draft in drafts:
        draft.write_bytes(b"tiny-agent-nb snapshot 3 lines=1 half written")
    drafts.append(target.with_name(f".{target.name}.{'a' * 12}.tmp"))
    drafts[2].symlink_to(session_path)
    kept = [
        _draft(snapshot_path(session_path.with_name("other.agent.jsonl"))),
        target.with_name(f".{target.name}.notahexname.tmp"),
        target.with_name(f"{target.name}.{'b' * 12}.tmp"),
    ]
    for other in kept:
        other.write_bytes(b"not ours to remove")
    load_session(session_path)
    assert all(draft.exists() for draft in drafts)  # a reader never writes
    with SessionStore.open(session_path):
        pass
    left = sorted(p.name for p in session_path.parent.iterdir() if p.name.endswith(".tmp"))
    assert left == sorted(p.name for p in kept)
    assert session_path.exists()  # the symlink went, not the file it names
    load_session(session_path)


def test_a_deferred_table_whose_making_fails_fails_again_at_its_next_use(
    session_path: Path, header_init: HeaderInit
) -> None:
    """The maker is forgotten only once it has made the table: a failure is not turned
    into an AttributeError on every later use."""
    with SessionStore.open(session_path, create=header_init) as store:
        for _ in range(SNAPSHOT_TAIL // 8 + 1):
            complete_run(store)
    tables = load_session(session_path)._tables
    make, calls = tables._deferred["ids"], []

    def failing_once() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the disk went away")
        return make()

    tables._deferred["ids"] = failing_once
    with pytest.raises(OSError, match="went away"):
        tables.ids  # noqa: B018 (the first use makes it)
    full = load_session_bytes(session_path.read_bytes())._tables
    assert list(tables.ids.items()) == list(full.ids.items())
    assert "ids" not in tables._deferred and len(calls) == 2


def test_the_reducers_own_tables_are_made_from_a_snapshot_on_their_first_use(
    session_path: Path, header_init: HeaderInit
) -> None:
    """`ids` and `intent_by_call`: made by the first commit (or copy), never by a read."""
    with SessionStore.open(session_path, create=header_init) as store:
        runs = [complete_run(store) for _ in range(SNAPSHOT_TAIL // 8 + 1)]
    full = load_session_bytes(session_path.read_bytes())._tables
    tables = load_session(session_path)._tables
    assert set(tables._deferred) == {"ids", "intent_by_call"}  # not made by the load
    assert list(tables.intent_by_call.items()) == list(full.intent_by_call.items())
    assert list(tables.ids.items()) == list(full.ids.items())
    assert tables._deferred == {} and tables == full
    with SessionStore.open(session_path) as store:  # a writer's reducer makes and uses them
        assert "ids" in store._state._tables._deferred
        with pytest.raises(SessionError, match="already used"):
            store.commit(runs[0].start("an operation id the snapshot covers"))
        run = Run(environment=store.header.environmentIdentity)
        store.commit(run.start("again"))
        store.commit(run.attempt())
        store.commit(run.answer(None, [("c", "read_file", {"path": "f"})]))
        store.commit([run.intent("c", READ_FILE, {"path": "f"})])
        with pytest.raises(SessionError, match="already has toolStarted"):
            store.commit([run.intent("c", READ_FILE, {"path": "f"})])
    _same_as_full_read(session_path)


def test_a_header_longer_than_the_first_read_still_loads_through_the_snapshot(
    session_path: Path,
) -> None:
    """The reader reads BLOCK bytes for the header line before the snapshot's digests;
    a longer header line is read on, whole."""
    init = HeaderInit(cwd="/w" * 40_000, provider="p", model="m", environment_identity="/w")
    with SessionStore.open(session_path, create=init) as store:
        for _ in range(SNAPSHOT_TAIL // 8 + 1):
            complete_run(store)
    assert session_path.read_bytes().index(b"\n") > _source.BLOCK
    assert load_session(session_path).snapshot_lines > 0
    _snapshot_of(session_path, session_path.read_bytes(), alter=True)
    assert _used(session_path)


def test_a_load_through_a_snapshot_reads_the_session_once(
    long_session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header line is read from the file's first BLOCK bytes, then every covered
    byte once for its digest: a first read of a whole chunk read a short session twice
    (register row "header-read")."""
    read: list[int] = []
    pread, preadv = os.pread, os.preadv

    def counted_pread(fd: int, size: int, offset: int) -> bytes:
        data = pread(fd, size, offset)
        read.append(len(data))
        return data

    def counted_preadv(fd: int, buffers: list[Any], offset: int) -> int:
        got = preadv(fd, buffers, offset)
        read.append(got)
        return got

    size = long_session.stat().st_size
    assert _source.BLOCK < size < _source.CHUNK
    monkeypatch.setattr(os, "pread", counted_pread)
    monkeypatch.setattr(os, "preadv", counted_preadv)
    assert load_session(long_session).snapshot_lines > 0
    # The header's first BLOCK, the covered bytes, and the few lines past the snapshot.
    assert sum(read) < size + _source.BLOCK + 4096


def test_a_first_open_reads_no_line_back_to_write_its_snapshot(
    long_session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer's open with no snapshot scans the file once, takes the digests of its
    blocks as it reads, and MACs its new snapshot with them: only the reload that
    verifies it reads the covered bytes again (register row "scan-blocks"). Reading every
    line back to hash it for the MAC read the session a third time."""
    snapshot_path(long_session).unlink()
    read: list[int] = []
    pread, preadv = os.pread, os.preadv

    def counted_pread(fd: int, size: int, offset: int) -> bytes:
        data = pread(fd, size, offset)
        read.append(len(data))
        return data

    def counted_preadv(fd: int, buffers: list[Any], offset: int) -> int:
        got = preadv(fd, buffers, offset)
        read.append(got)
        return got

    size = long_session.stat().st_size
    monkeypatch.setattr(os, "pread", counted_pread)
    monkeypatch.setattr(os, "preadv", counted_preadv)
    with SessionStore.open(long_session) as store:
        assert store._snapshot_lines == store.load().transaction_count
        # The header's first BLOCK, the scan, the snapshot's partial last block, the reload.
        assert sum(read) < 2 * size + 2 * _source.BLOCK


def test_load_session_never_writes_a_snapshot(long_session: Path) -> None:
    snapshot_path(long_session).unlink()
    load_session(long_session)
    assert not snapshot_path(long_session).exists()


def _body(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """A snapshot's JSON and its binary section."""
    first, _, rest = raw.partition(b"\n")
    size = int(first.split(b" json=")[1].split(b" ")[0])
    return json.loads(rest[:size]), rest[size:]


def test_a_snapshot_holds_no_string_the_session_does_not(long_session: Path) -> None:
    body, binary = _body(snapshot_path(long_session).read_bytes())
    session = long_session.read_bytes()
    offset, size = body["ids"]
    strings = {*binary[offset : offset + size].decode("ascii").split(","), *body["strings"]}
    missing = {s for s in strings if json.dumps(s)[1:-1].encode() not in session}
    assert len(strings) > 100 and missing == {"settled", "failed", "pending"}  # statuses


def test_a_snapshot_keeps_its_ids_and_integer_columns_in_its_binary_section(
    long_session: Path,
) -> None:
    body, binary = _body(snapshot_path(long_session).read_bytes())
    offset, size = body["ids"]
    assert binary[offset : offset + size].decode("ascii").split(",") == list(
        load_session_bytes(long_session.read_bytes())._tables.ids
    )
    columns = [*body["entries"], body["lineSizes"]]
    arrays = [c["a"] for c in columns if isinstance(c, dict) and "a" in c]
    assert arrays and all(offset + count * width <= len(binary) for offset, count, width in arrays)


@pytest.mark.parametrize(
    ("deltas", "counts"),
    [
        ([7], [1]),
        ([7], [5]),
        ([0], [4]),
        ([3, 2], [1, 9]),
        ([9, -2], [1, 6]),  # a negative step
        ([5, 0], [1, 3]),
        ([4, 1, 3], [2, 3, 1]),
        ([-1, 1], [2, 2]),
    ],
)
def test_a_column_of_steady_steps_decodes_to_the_sums_of_its_differences(
    deltas: list[int], counts: list[int]
) -> None:
    """One steady step is decoded as a range; the sums are those of every difference."""
    expected = list(accumulate(chain.from_iterable(map(repeat, deltas, counts))))
    assert list(columns.sums(deltas, counts)) == expected


def _resealed(path: Path, change: Any) -> None:
    """The snapshot beside `path` with its JSON changed by `change` (a function of the
    JSON object), sealed again under the user's key: authentic, and wrong."""
    raw = snapshot_path(path).read_bytes()
    body, binary = _body(raw)
    change(body)
    text = json.dumps(body, separators=(",", ":")).encode()
    head = raw[: raw.index(b" json=")] + b" json=%d " % len(text)
    key = read_key()
    assert key is not None
    blocks = _source.block_digests(path.read_bytes()[: int(head.split(b"bytes=")[1].split()[0])])
    mac = _mac(key, head, (text, binary), blocks).hex().encode()
    snapshot_path(path).write_bytes(head + b"mac=" + mac + b"\n" + text + binary)


def _line_sizes(width: int = 0, offset: int = 0, count: int = 0) -> Any:
    def change(body: dict[str, Any]) -> None:
        array = body["lineSizes"]["a"]
        array[0] += offset
        array[1] += count
        array[2] = width or array[2]

    return change


@pytest.mark.parametrize(
    "change",
    [
        _line_sizes(offset=1 << 20),  # past the end of the binary section
        _line_sizes(offset=-(1 << 20)),
        _line_sizes(count=1),  # one more than the lines
        _line_sizes(width=3),  # no such width
        lambda body: body.update(ids=[body["ids"][0], body["ids"][1] + (1 << 20)]),
        lambda body: body.update(ids=[-1, body["ids"][1]]),
    ],
    ids=[
        "past-the-end",
        "before-the-start",
        "count",
        "width",
        "ids-past-the-end",
        "ids-before-the-start",
    ],
)
def test_an_authentic_snapshot_whose_spans_do_not_fit_gives_a_full_read(
    long_session: Path, change: Any
) -> None:
    _snapshot_of(long_session, long_session.read_bytes(), alter=True)
    _resealed(long_session, lambda body: None)
    assert _used(long_session)  # resealing alone changes nothing
    _resealed(long_session, change)
    _same_as_full_read(long_session)
    assert not _used(long_session)


def test_a_session_read_in_many_chunks_is_hashed_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The covered prefix is read a chunk at a time into one buffer: a byte changed in
    any chunk, the last one short, gives a full read."""
    monkeypatch.setattr(_source, "CHUNK", _source.BLOCK)
    path = tmp_path / "s.agent.jsonl"
    init = HeaderInit(cwd="/w", provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        run = Run(environment=store.header.environmentIdentity)
        store.commit(run.start("go"))
        for i in range(12):
            store.commit(run.attempt())
            store.commit(run.answer(None, [(f"c{i}", "read_file", {"path": "f"})]))
            intent = run.intent(f"c{i}", READ_FILE, {"path": "f"})
            store.commit([intent])
            store.commit([run.result(intent, "y" * 20_000)])
    data = path.read_bytes()
    assert len(data) > 3 * _source.BLOCK and len(data) % _source.BLOCK
    _snapshot_of(path, data, alter=True)
    assert _used(path)
    # A tool result's "y" made "z": every line still loads, only the bytes differ.
    spots = [data.index(b"yyyy", k * _source.BLOCK) for k in range(4)] + [data.rindex(b"y")]
    assert data.rindex(b"y") > 3 * _source.BLOCK
    for spot in spots:
        path.write_bytes(data[:spot] + b"z" + data[spot + 1 :])
        _same_as_full_read(path)
        assert not _used(path)
