"""The context projection: what the model is sent, built incrementally."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import pytest

from tiny_agent_nb.agent import NOT_STARTED, ContextProjection
from tiny_agent_nb.agent._turns import SUMMARY_LEAD
from tiny_agent_nb.provider import encoded, wire
from tiny_agent_nb.session import SessionState, SessionStore
from tiny_agent_nb.session import facts as f

from helpers.scenario import BASH, Run, complete_run


def decode(parts: list[wire.Encoded]) -> list[dict[str, object]]:
    return json.loads(b"[" + b",".join(parts) + b"]")  # type: ignore[no-any-return]


def test_incremental_projection_equals_a_rebuild_from_the_file(store: SessionStore) -> None:
    live = ContextProjection("be brief")
    store.subscribe(live.apply)
    for _ in range(37):
        complete_run(store)
    rebuilt = ContextProjection.from_state(store.load(), "be brief")
    assert decode(encoded(live.context())) == decode(encoded(rebuilt.context()))
    messages = decode(encoded(live.context()))
    assert messages[0] == {"role": "system", "content": "be brief"}
    assert len(messages) == 1 + 37 * 4  # user, assistant call, tool result, answer
    # The history in one piece: the OpenAI-compatible provider keeps it in maps of 1 MiB.
    assert len(encoded(live.context())) == 1 + 1


def test_never_started_tool_calls_are_answered_before_the_next_message(
    store: SessionStore, tmp_path: Path
) -> None:
    projection = ContextProjection(None)
    store.subscribe(projection.apply)
    run = Run(environment=str(tmp_path))
    store.commit(run.start("two commands"))
    store.commit(run.attempt())
    store.commit(
        run.answer(None, [("c1", "bash", {"command": "a"}), ("c2", "bash", {"command": "b"})])
    )
    intent = run.intent("c1", BASH, {"command": "a"})
    store.commit([intent, Run.result(intent, "done")])
    store.commit(
        [
            f.NewFact(f.AbortRequested(operationId=run.operation_id, reason="Ctrl-C")),
            f.NewFact(f.OperationFinished(operationId=run.operation_id, outcome="aborted")),
        ]
    )
    pending = decode(encoded(projection.context()))
    assert pending[-1] == {"role": "tool", "tool_call_id": "c2", "content": NOT_STARTED}
    store.commit([f.user_message("next question")])
    after = decode(encoded(projection.context()))
    roles = [(m["role"], m.get("tool_call_id")) for m in after]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("tool", "c1"),
        ("tool", "c2"),
        ("user", None),
    ]


def test_compaction_replaces_what_it_summarizes(store: SessionStore) -> None:
    complete_run(store, "first")
    through = list(store.load().entries)[-1]
    store.commit(
        [f.NewFact(f.CompactionEntry(summary="they listed files", throughEntryId=through))]
    )
    complete_run(store, "second")
    messages = decode(encoded(ContextProjection.from_state(store.load(), None).context()))
    assert messages[0] == {"role": "user", "content": SUMMARY_LEAD}
    assert messages[1] == {
        "role": "assistant",  # the model's own note: not in the user's voice
        "content": "[Summary of the earlier conversation]\nthey listed files",
    }
    assert messages[2] == {"role": "user", "content": "second"}


def test_a_checkpoint_keeps_the_messages_after_its_cut_and_their_unanswered_call(
    store: SessionStore, tmp_path: Path
) -> None:
    live = ContextProjection(None)
    store.subscribe(live.apply)
    complete_run(store, "first")
    run = Run(environment=str(tmp_path))
    store.commit(run.start("two commands"))
    cut = list(store.load().entries)[-2]  # "first"'s answer: the cut keeps "two commands"
    store.commit(run.attempt())
    store.commit(
        run.answer(None, [("c1", "bash", {"command": "a"}), ("c2", "bash", {"command": "b"})])
    )
    intent = run.intent("c1", BASH, {"command": "a"})
    store.commit([intent, Run.result(intent, "done")])
    store.commit([f.NewFact(f.OperationFinished(operationId=run.operation_id, outcome="aborted"))])
    store.commit([f.NewFact(f.CompactionEntry(summary="they listed files", throughEntryId=cut))])
    expected = [
        ("user", SUMMARY_LEAD),
        ("assistant", "[Summary of the earlier conversation]\nthey listed files"),
        ("user", "two commands"),
        ("assistant", None),
        ("tool", "done"),
        ("tool", NOT_STARTED),  # c2 never started: still answered after the checkpoint
    ]
    for projection in (live, ContextProjection.from_state(store.load(), None)):
        messages = decode(encoded(projection.context()))
        assert [(m["role"], m["content"] or None) for m in messages] == expected
    store.commit([f.user_message("next")])
    assert decode(encoded(live.context())) == decode(
        encoded(ContextProjection.from_state(store.load(), None).context())
    )
    assert decode(encoded(live.context()))[-2:] == [
        {"role": "tool", "tool_call_id": "c2", "content": NOT_STARTED},
        {"role": "user", "content": "next"},
    ]


def test_the_projection_keeps_encoded_messages_not_entry_objects(store: SessionStore) -> None:
    """A kernel runs with the projection alive: kept EntryFacts would be ~10 objects each
    for the cyclic GC to rescan on every full collection, for the whole history."""
    for _ in range(60):
        complete_run(store)
    state = store.load()
    assert len(state.entries) == 240
    gc.collect()
    before = len(gc.get_objects())
    projection = ContextProjection.following(lambda: state, "be brief")  # as a kernel's
    sent = encoded(projection.context())  # built into the provider's cache
    gc.collect()
    gc.collect()  # a tuple is untracked once its inner tuples were, one pass later
    kept = len(gc.get_objects()) - before
    assert len(decode(sent)) == 1 + 240
    assert kept < 30, f"the projection of 240 entries keeps {kept} tracked objects"


def projection_held_and_sent(state: SessionState) -> tuple[int, int]:
    """Bytes a kernel's projection of `state` and the OpenAI-compatible provider's cache
    of it hold in Python objects (tracemalloc: the cache's memory maps are not among
    them), and bytes it sends."""
    gc.collect()
    tracemalloc.start()
    try:
        projection = ContextProjection.following(lambda: state, None)
        sent = sum(len(part) for part in encoded(projection.context()))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return held, sent


def test_the_projection_holds_one_copy_of_what_it_sends(store: SessionStore) -> None:
    """The encoded history is kept once, in the maps a request sends views of: a second
    copy per entry (to rebuild after a checkpoint) doubled a kernel's memory for its
    context, and runs kept as `bytes` were as large as what they send."""
    for i in range(40):
        complete_run(store, f"{i} " + "long prompt " * 1000)  # 12 KB a run
    held, sent = projection_held_and_sent(store.load())
    assert sent > 40 * 12_000
    assert held < 0.1 * sent, f"Python objects hold {held:,} bytes to send {sent:,}"


def test_the_projection_keeps_an_id_and_an_offset_per_entry(store: SessionStore) -> None:
    """Per entry, beyond its message: a reference to the id string the session's tables
    hold and a few 8-byte numbers (where its message starts, where each message ends,
    where the provider's cache holds it), where an (id, offset) tuple with its own copy
    of the id and an int object cost about ten times that, for the whole history."""
    for _ in range(500):
        complete_run(store, "ok")
    state = store.load()
    # Once first: decoding fills pydantic's (bounded) cache of short strings.
    ContextProjection.from_state(state, None)
    held, _ = projection_held_and_sent(state)
    beyond = held / len(state.entries)  # the messages are in the maps
    assert beyond < 40, f"{beyond:.0f} bytes per entry beyond its message"


def test_a_following_projection_reads_the_session_at_its_first_request_only(
    store: SessionStore,
) -> None:
    loads = []

    def load() -> SessionState:
        loads.append(1)
        return store.load()

    projection = ContextProjection.following(load, "be brief")
    store.subscribe(projection.apply)
    complete_run(store, "before the first request")
    assert loads == []  # committing, and following the commits, reads nothing
    first = decode(encoded(projection.context()))
    assert loads == [1]
    assert first == decode(
        encoded(ContextProjection.from_state(store.load(), "be brief").context())
    )
    # After the build the facts it read are not projected twice; new ones are projected.
    complete_run(store, "after it")
    assert decode(encoded(projection.context())) == decode(
        encoded(ContextProjection.from_state(store.load(), "be brief").context())
    )
    assert len(decode(encoded(projection.context()))) == 1 + 2 * 4
    assert loads == [1]


def test_a_following_projection_whose_build_failed_builds_again_at_the_next_read(
    store: SessionStore,
) -> None:
    complete_run(store)
    failures = [OSError("the disk went away")]

    def load() -> SessionState:
        if failures:
            raise failures.pop()
        return store.load()

    projection = ContextProjection.following(load, None)
    store.subscribe(projection.apply)
    with pytest.raises(OSError):
        encoded(projection.context())
    complete_run(store, "second")
    assert decode(encoded(projection.context())) == decode(
        encoded(ContextProjection.from_state(store.load(), None).context())
    )
