"""SessionStore behaviour in one process: create, commit, repair, refuse, observe."""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tiny_agent_nb.session import (
    Durability,
    HeaderInit,
    InvalidTransactionError,
    NotASessionError,
    SessionClosedError,
    SessionStore,
    ToolIdentity,
    load_session,
    load_session_bytes,
    new_id,
)
from tiny_agent_nb.session import facts as f

from helpers.scenario import BASH, DIGEST, READ_FILE, Run, complete_run, intent_result


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


def test_create_writes_one_header_line(session_path: Path, header_init: HeaderInit) -> None:
    with SessionStore.open(session_path, create=header_init, clock=lambda: 1787371200000) as s:
        assert s.created
        header = s.header
    raw = session_path.read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    assert json.loads(raw) == {
        "kind": "header",
        "version": 2,
        "id": header.id,
        "createdAt": 1787371200000,
        "cwd": header_init.cwd,
        "provider": "openrouter",
        "model": "test/model",
        "environmentIdentity": header_init.environment_identity,
    }
    assert load_session(session_path).summary()["transactionCount"] == 0


def test_open_without_create_refuses_missing_and_empty(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        SessionStore.open(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(NotASessionError, match="empty"):
        SessionStore.open(empty)
    assert empty.read_bytes() == b""


def test_writer_refuses_to_overwrite_a_file_that_is_not_a_session(
    tmp_path: Path, header_init: HeaderInit
) -> None:
    other = tmp_path / "data.jsonl"
    other.write_bytes(b'{"name":"not ours"}\n')
    with pytest.raises(NotASessionError, match="line 1"):
        SessionStore.open(other, create=header_init)
    assert other.read_bytes() == b'{"name":"not ours"}\n'


def test_commit_assigns_seq_ids_and_timestamps(session_path: Path, header_init: HeaderInit) -> None:
    ticks = iter(range(1000, 2000))
    with SessionStore.open(session_path, create=header_init, clock=lambda: next(ticks)) as s:
        run = Run(environment=header_init.environment_identity)
        first = s.commit(run.start("hello"))
        second = s.commit(run.attempt())
    assert [fact.seq for fact in first + second] == [1, 2, 3]
    assert [fact.at for fact in first + second] == [1001, 1001, 1002]  # one clock read per commit
    assert len({fact.id for fact in first + second}) == 3
    written = lines(session_path)
    assert written[1].startswith(b"[") and written[2].startswith(b"{")  # array vs bare fact
    assert written[-1] == b""


def test_reopen_continues_where_the_file_ends(session_path: Path, header_init: HeaderInit) -> None:
    with SessionStore.open(session_path, create=header_init) as s:
        complete_run(s)
        before = s.load().summary()
    with SessionStore.open(session_path, create=header_init) as s:  # create is ignored now
        assert not s.created
        assert s.load().summary() == before
        run = complete_run(s)
    state = load_session(session_path)
    assert state.last_seq == 2 * before["lastSeq"]
    assert state.operations[run.operation_id].status == "completed"


def test_torn_tail_is_ignored_by_readers_and_cut_by_the_writer(
    session_path: Path, header_init: HeaderInit
) -> None:
    with SessionStore.open(session_path, create=header_init) as s:
        complete_run(s)
        committed = s.load().summary()
    torn = b'{"kind":"entry","seq":12,"id":"01a2'
    with session_path.open("ab") as fh:
        fh.write(torn)
    damaged = session_path.read_bytes()

    state = load_session(session_path)
    assert state.torn_tail_bytes == len(torn)
    assert {**state.summary(), "tornTailBytes": 0} == committed
    assert session_path.read_bytes() == damaged  # readers never write

    with SessionStore.open(session_path) as s:
        assert s.repaired_tail_bytes == len(torn)
        assert session_path.read_bytes() == damaged[: -len(torn)]
        s.commit([f.user_message("after the crash")])
    healed = load_session(session_path)
    assert healed.torn_tail_bytes == 0
    assert healed.last_seq == committed["lastSeq"] + 1
    assert lines(session_path)[-2].startswith(b'{"kind":"entry","seq":12,')


def test_a_writer_removes_the_snapshot_cache_an_earlier_version_left_beside_it(
    session_path: Path, header_init: HeaderInit
) -> None:
    """The session file is the only store (docs/session-format.md §8): the `.snapshot` cache an
    earlier version wrote beside it, and its killed writer's drafts, go when a writer
    opens the session; a reader leaves them, and so does every writer a file of the
    user's of that name, or a symbolic link."""
    SessionStore.open(session_path, create=header_init).close()
    cache = session_path.with_name(f"{session_path.name}.snapshot")
    draft = session_path.with_name(f".{cache.name}.0123456789ab.tmp")
    kept = [session_path.with_name(f".{cache.name}.notours.tmp")]
    cache.write_bytes(b"tiny-agent-nb snapshot 3 lines=1 bytes=2 json=3 mac=00\n{}")
    draft.write_bytes(b"a draft")
    kept[0].write_bytes(b"the user's")
    load_session(session_path)
    assert cache.exists() and draft.exists()
    SessionStore.open(session_path).close()
    assert not cache.exists() and not draft.exists() and kept[0].exists()

    cache.write_bytes(b"the user's notes")
    SessionStore.open(session_path).close()
    assert cache.read_bytes() == b"the user's notes"
    cache.unlink()
    target = session_path.with_name("elsewhere")
    target.write_bytes(b"tiny-agent-nb snapshot 3 ...")
    cache.symlink_to(target)
    SessionStore.open(session_path).close()
    assert cache.is_symlink() and target.exists()


def test_torn_header_is_replaced_when_creating(session_path: Path, header_init: HeaderInit) -> None:
    session_path.write_bytes(b'{"kind":"header","vers')
    with pytest.raises(NotASessionError, match="torn"):
        load_session(session_path)
    with SessionStore.open(session_path, create=header_init) as s:
        assert s.created
    assert load_session(session_path).transaction_count == 0


@pytest.mark.parametrize(("durability", "per_run"), [("power", 5), ("process", 0)])
def test_power_durability_syncs_each_commit_that_precedes_an_effect(
    session_path: Path,
    header_init: HeaderInit,
    monkeypatch: pytest.MonkeyPatch,
    durability: Durability,
    per_run: int,
) -> None:
    """Only the OS can tell whether data reached the disk, so count what is asked of it.
    A run's 8 commits: [user, runStarted], two stepAttempts, a toolStarted and
    operationFinished sync; the two answers and the tool result wait for the next sync."""
    synced: list[int] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def sync(fd: int, real: Callable[[int], None] = real) -> None:
            synced.append(fd)
            real(fd)

        monkeypatch.setattr(os, name, sync)
    with SessionStore.open(session_path, create=header_init, durability=durability) as s:
        assert s.durability == durability
        created = len(synced)  # power: the new file's header, and its directory
        assert created == (2 if durability == "power" else 0)
        for _ in range(3):
            complete_run(s)
        assert len(synced) - created == 3 * per_run
    assert len(synced) - created == 3 * per_run  # nothing was left to sync at close
    assert load_session(session_path).operations


def test_unknown_durability_is_refused(session_path: Path, header_init: HeaderInit) -> None:
    with pytest.raises(ValueError, match="durability"):
        SessionStore.open(session_path, create=header_init, durability="sometimes")  # type: ignore[arg-type]
    assert not session_path.exists()


def test_load_returns_a_copy(store: SessionStore) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("one"))
    copy = store.load()
    store.commit(run.attempt())
    assert copy.last_seq == 2 and len(copy.attempts) == 0
    assert store.load().last_seq == 3


def test_a_loaded_state_is_read_only_in_fact(store: SessionStore) -> None:
    complete_run(store)
    state = load_session(store.path)
    before = state.summary()
    for name in ("path", "header", "torn_tail_bytes"):
        with pytest.raises(AttributeError):
            setattr(state, name, getattr(state, name))
    assert not hasattr(state, "tables")
    for view in (state.operations, state.attempts, state.tool_intents, state.usage):
        key = next(iter(view))
        with pytest.raises(TypeError):
            del view[key]  # type: ignore[attr-defined]
    state.totals.input_tokens += 1000  # a copy: the state's totals do not move
    assert state.summary() == before


def test_subscribers_see_committed_facts_in_order(store: SessionStore) -> None:
    seen: list[int] = []
    unsubscribe = store.subscribe(lambda committed: seen.extend(x.seq for x in committed))
    store.subscribe(lambda committed: 1 / 0)  # a broken observer does not fail the commit
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("one"))
    store.commit(run.attempt())
    unsubscribe()
    store.commit(run.answer("hi"))
    assert seen == [1, 2, 3]
    assert store.load().last_seq == 5


def test_refused_transactions_are_not_observed(store: SessionStore) -> None:
    seen: list[object] = []
    store.subscribe(seen.append)
    with pytest.raises(InvalidTransactionError):
        store.commit([f.run_started(new_id(), new_id())])
    assert seen == []


def test_closed_store_refuses_work(session_path: Path, header_init: HeaderInit) -> None:
    s = SessionStore.open(session_path, create=header_init)
    s.close()
    s.close()  # idempotent
    with pytest.raises(SessionClosedError):
        s.commit([f.user_message("late")])
    with pytest.raises(SessionClosedError):
        s.load()
    # (the path in the repr holds the test's name, which says "closed" too)
    assert repr(s).endswith(" closed durability=process>")


# ------------------------------------------------------------- refused commits


def _refusals(store: SessionStore) -> dict[str, tuple[str, list[object]]]:
    """Transactions that break one rule each (and the reason expected), against a
    session with one finished run and one open run that has a pending bash intent."""
    env = store.header.environmentIdentity
    done = complete_run(store)
    run = Run(environment=env)
    store.commit(run.start("second"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("c1", "bash", {"command": "ls"}), ("c2", "bash", {})]))
    intent = run.intent("c1", BASH, {"command": "ls"})
    store.commit([intent])
    assert run.attempt_id is not None and intent.id is not None
    bad_key = run.intent("c2", BASH, {})
    object.__setattr__(bad_key.body, "replayKey", "sha256:" + "0" * 64)
    reserved = intent.body.resultEntryId  # type: ignore[union-attr]
    fresh = new_id()
    return {
        "empty": ("at least one fact", []),
        "reused id": ("already used", [f.user_message("x", id=done.operation_id)]),
        "not uuid7": (
            "not a UUIDv7",
            [f.user_message("x", id="01a22960-953b-4b8c-9834-3e442e43865b")],
        ),
        "second open operation": (
            "still open",
            [f.user_message("x", id=fresh), f.run_started(new_id(), fresh)],
        ),
        "attempt while tool pending": (
            "without a result",
            [
                f.NewFact(
                    f.StepAttempt(
                        operationId=run.operation_id,
                        step=2,
                        attempt=1,
                        provider="openrouter",
                        model="test/model",
                        configurationDigest=DIGEST,
                    )
                )
            ],
        ),
        "finish with pending intent": ("toolStarted without a result", run.finish()),
        "second intent for one call": (
            "already has toolStarted",
            [run.intent("c1", BASH, {"command": "ls"})],
        ),
        "result for another call": (
            "its toolStarted was for",
            [
                f.tool_result(
                    tool_started_id=intent.id,
                    result_entry_id=reserved,
                    tool_call_id="c2",
                    content="",
                    outcome="completed",
                )
            ],
        ),
        "result with unreserved id": (
            "is not the resultEntryId",
            [
                f.tool_result(
                    tool_started_id=intent.id,
                    result_entry_id=new_id(),
                    tool_call_id="c1",
                    content="",
                    outcome="completed",
                )
            ],
        ),
        "usage on finished operation": (
            "already completed",
            [f.usage(tool_started_id=next(iter(store.load().tool_intents)))],
        ),
        "double usage": ("already has usage", [f.usage(attempt_id=run.attempt_id)]),
        "abort of finished operation": (
            "already completed",
            [f.NewFact(f.AbortRequested(operationId=done.operation_id, reason="x"))],
        ),
        "valid then invalid in one array": (
            "fact 2 of the transaction",
            [Run.result(intent, "ok"), f.usage(attempt_id=run.attempt_id)],
        ),
        "replay key mismatch": ("does not match", [bad_key]),
        "tool name differs from call": (
            "the tool call asked for",
            [run.intent("c2", READ_FILE, {})],
        ),
        "unknown tool call": ("no tool call", [run.intent("c9", BASH, {})]),
        "compaction through a record": (
            "is no earlier entry",
            [f.NewFact(f.CompactionEntry(summary="summary", throughEntryId=run.attempt_id))],
        ),
    }


def test_every_refused_commit_leaves_file_and_state_identical(
    session_path: Path, header_init: HeaderInit
) -> None:
    with SessionStore.open(session_path, create=header_init) as s:
        for name, (reason, transaction) in _refusals(s).items():
            before_bytes = session_path.read_bytes()
            before = s.load()
            with pytest.raises(InvalidTransactionError) as info:
                s.commit(transaction)  # type: ignore[arg-type]
            assert "nothing written" in str(info.value), name
            assert reason in str(info.value), (name, str(info.value))
            after = s.load()
            assert session_path.read_bytes() == before_bytes, name
            assert after.summary() == before.summary(), name
            assert after._tables == before._tables, name
        # and the store still accepts the valid continuation
        state = s.load()
        intent = next(x for x in state.tool_intents.values() if x.status == "pending")
        s.commit([intent_result(intent, "ok")])
    assert load_session(session_path).tool_intents[intent.id].status == "completed"


def test_commit_size_does_not_depend_on_history(store: SessionStore) -> None:
    """A commit writes its own line only: the file grows by exactly that line."""
    for _ in range(20):
        complete_run(store)
    size = store.path.stat().st_size
    committed = store.commit([f.user_message("x" * 100)])
    assert store.path.stat().st_size - size == len(committed[0].model_dump_json()) + 1


def test_a_subscriber_may_read_the_state_it_is_told_about(store: SessionStore) -> None:
    seen: list[int] = []
    store.subscribe(lambda committed: seen.append(store.load().last_seq))
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("one"))
    store.commit(run.attempt())
    assert seen == [2, 3]


def test_entries_read_back_as_committed_from_any_position_in_a_line(
    store: SessionStore,
) -> None:
    """Entries are kept as (line, position) slots and decoded when read."""
    run = Run(environment=store.header.environmentIdentity)
    committed = [store.commit(run.start("ünïcode prompt")), store.commit(run.attempt())]
    committed.append(store.commit(run.answer(None, [("call_1", "bash", {"command": "ls"})])))
    intent = run.intent("call_1", BASH, {"command": "ls"})
    committed.append(store.commit([intent]))
    committed.append(store.commit([Run.result(intent, "out")]))
    result_id = committed[-1][0].id
    # A compaction second in its line, after a user entry.
    committed.append(
        store.commit(
            [
                f.user_message("next"),
                f.NewFact(f.CompactionEntry(summary="summary", throughEntryId=result_id)),
            ]
        )
    )
    expected = {fact.id: fact for tx in committed for fact in tx if fact.kind == "entry"}
    assert len(expected) == 5

    for state in (store.load(), load_session(store.path)):
        assert list(state.entries) == list(expected)
        assert dict(state.entries.items()) == expected
        assert state.entries.last() == committed[-1][1]
        assert state.entries.type_of(result_id) == "toolResult"
        assert state.entries.type_of(committed[0][0].id) == "user"
        assert state.entries.type_of(committed[2][0].id) == "assistant"
        assert state.entries.type_of("no-such-id") is None
        assert "no-such-id" not in state.entries
        with pytest.raises(KeyError):
            state.entries["no-such-id"]


def test_a_copy_keeps_its_entries_when_later_commits_arrive(store: SessionStore) -> None:
    first = store.commit([f.user_message("one")])[0]
    copy = store.load()
    store.commit([f.user_message("two")])
    assert list(copy.entries.values()) == [first]
    assert len(store.load().entries) == 2


def test_state_keeps_each_fact_once(store: SessionStore) -> None:
    """A state keeps its validated entries and a record per run, attempt and tool call
    (docs/session-format.md §8.1), not a second copy of any: the cyclic GC's heap grows by
    a few tracked objects per fact (4.2 here: an entry is ~10), which every full
    collection in a kernel with a long session walks."""
    for _ in range(3):  # warm-up: first-use caches of pydantic, re, json
        complete_run(store)
    gc.collect()
    before = len(gc.get_objects())
    facts_before = store.load().last_seq
    for _ in range(60):
        complete_run(store)
    gc.collect()
    kept = len(gc.get_objects()) - before
    facts = store.load().last_seq - facts_before
    assert facts > 500
    assert kept / facts < 5, f"{kept} tracked objects kept for {facts} facts"


def test_an_mcp_tool_is_recorded_under_its_servers_name_for_the_prefixed_call(
    store: SessionStore,
) -> None:
    """docs/spec.md §5: the model calls `demo__echo`; the intent names the server's `echo`."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("echo"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("c1", "demo__echo", {"text": "hi"})]))
    echo = ToolIdentity(name="echo", version="0.3.1", source="mcp:demo")
    intent = run.intent("c1", echo, {"text": "hi"})
    store.commit([intent])
    store.commit([Run.result(intent, "hi")])
    (recorded,) = store.load().tool_intents.values()
    assert (recorded.tool, recorded.status) == (echo, "completed")


def test_an_in_memory_store_writes_the_bytes_a_file_store_writes(
    session_path: Path, header_init: HeaderInit
) -> None:
    """The same open, repair and commit code over a bytearray: a torn tail is cut, a
    commit appends the very line a store on disk appends, and the bytes load alike."""
    with SessionStore.open(session_path, create=header_init) as store:
        complete_run(store, "hi")
    torn = session_path.read_bytes() + b'[{"kind":"userMes'
    session_path.write_bytes(torn)
    buffer = bytearray(torn)
    committed = [f.user_message("after the tear", id=new_id())]
    clock = lambda: 1787371200000  # noqa: E731
    with SessionStore.open(session_path, clock=clock) as on_disk:
        assert on_disk.repaired_tail_bytes == len(b'[{"kind":"userMes')
        on_disk.commit(committed)
    with SessionStore.in_memory(buffer, clock=clock) as in_memory:
        assert in_memory.repaired_tail_bytes == len(b'[{"kind":"userMes')
        assert in_memory.path == Path("<memory>")
        in_memory.commit(committed)
        state = in_memory.load()
    assert bytes(buffer) == session_path.read_bytes()
    assert load_session_bytes(bytes(buffer)).summary() == load_session(session_path).summary()
    assert state.last_seq == load_session(session_path).last_seq


def test_an_in_memory_store_creates_a_session_in_an_empty_buffer(
    header_init: HeaderInit,
) -> None:
    buffer = bytearray()
    with SessionStore.in_memory(buffer, create=header_init) as store:
        assert store.created
        complete_run(store, "hi")
        expected = store.load().summary()
    assert buffer.endswith(b"\n") and buffer.count(b"\n") == 9
    assert load_session_bytes(bytes(buffer)).summary() == expected
    with pytest.raises(NotASessionError, match="empty"):
        SessionStore.in_memory(bytearray())
