"""The context projection: what the model is sent, built incrementally."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import pytest

from tiny_agent_nb.agent import NOT_STARTED, ContextProjection
from tiny_agent_nb.agent._context import SEALED_RUN, last_input_tokens
from tiny_agent_nb.agent._summary import SUMMARY_LEAD
from tiny_agent_nb.provider import wire
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
    assert decode(live.messages()) == decode(rebuilt.messages())
    messages = decode(live.messages())
    assert messages[0] == {"role": "system", "content": "be brief"}
    assert len(messages) == 1 + 37 * 4  # user, assistant call, tool result, answer
    assert len(live.messages()) == 1 + 1  # history is kept in maps of SEALED_RUN bytes


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
            f.abort_requested(run.operation_id, "Ctrl-C"),
            f.operation_finished(run.operation_id, "aborted"),
        ]
    )
    pending = decode(projection.messages())
    assert pending[-1] == {"role": "tool", "tool_call_id": "c2", "content": NOT_STARTED}
    store.commit([f.user_message("next question")])
    after = decode(projection.messages())
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
    store.commit([f.compaction("they listed files", through)])
    complete_run(store, "second")
    messages = decode(ContextProjection.from_state(store.load(), None).messages())
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
    store.commit([f.operation_finished(run.operation_id, "aborted")])
    store.commit([f.compaction("they listed files", cut)])
    expected = [
        ("user", SUMMARY_LEAD),
        ("assistant", "[Summary of the earlier conversation]\nthey listed files"),
        ("user", "two commands"),
        ("assistant", None),
        ("tool", "done"),
        ("tool", NOT_STARTED),  # c2 never started: still answered after the checkpoint
    ]
    for projection in (live, ContextProjection.from_state(store.load(), None)):
        messages = decode(projection.messages())
        assert [(m["role"], m["content"] or None) for m in messages] == expected
    store.commit([f.user_message("next")])
    assert decode(live.messages()) == decode(
        ContextProjection.from_state(store.load(), None).messages()
    )
    assert decode(live.messages())[-2:] == [
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
    projection = ContextProjection.from_state(state, "be brief")
    gc.collect()
    gc.collect()  # a tuple is untracked once its inner tuples were, one pass later
    kept = len(gc.get_objects()) - before
    assert len(decode(projection.messages())) == 1 + 240
    assert kept < 30, f"the projection of 240 entries keeps {kept} tracked objects"


def projection_held_and_sent(state: SessionState) -> tuple[int, int]:
    """Bytes a projection built from `state` holds in Python objects (tracemalloc: its
    memory maps are not among them), and bytes it sends."""
    gc.collect()
    tracemalloc.start()
    try:
        projection = ContextProjection.from_state(state, None)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return held, sum(len(part) for part in projection.messages())


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
    hold and an 8-byte offset, where an (id, offset) tuple with its own copy of the id
    and an int object cost about ten times that, for the whole history."""
    for _ in range(500):
        complete_run(store, "ok")
    state = store.load()
    # Once first: decoding fills pydantic's (bounded) cache of short strings.
    ContextProjection.from_state(state, None)
    held, _ = projection_held_and_sent(state)
    beyond = held / len(state.entries)  # the messages are in the maps
    assert beyond < 40, f"{beyond:.0f} bytes per entry beyond its message"


def test_a_followed_projection_fills_maps_of_sealed_run_bytes_as_a_rebuild_does(
    store: SessionStore,
) -> None:
    """A kernel's projection follows every commit for hours: each message is written
    once into a map of SEALED_RUN bytes, so a request sends one piece per map, and no
    copy the size of the history is ever made (and freed)."""
    live = ContextProjection(None)
    store.subscribe(live.apply)
    for i in range(400):
        complete_run(store, f"{i} " + "long prompt " * 1000)  # 12 KB a run: 4.8 MB
    parts = live.messages()
    total = sum(len(part) for part in parts)
    assert total > 4 * SEALED_RUN
    assert max(len(part) for part in parts) <= SEALED_RUN
    assert min(len(part) for part in parts[:-1]) > SEALED_RUN - 13_000  # each map filled
    assert len(parts) == total // SEALED_RUN + 1
    rebuilt = ContextProjection.from_state(store.load(), None).messages()
    assert [len(part) for part in rebuilt] == [len(part) for part in parts]
    assert decode(parts) == decode(rebuilt)


def test_a_message_larger_than_a_map_is_sent_whole_between_the_others(
    store: SessionStore,
) -> None:
    live = ContextProjection(None)
    store.subscribe(live.apply)
    complete_run(store, "small")
    complete_run(store, "x" * (SEALED_RUN + 5))
    complete_run(store, "small again")
    parts = live.messages()
    assert len(parts) == 3 and len(parts[1]) > SEALED_RUN
    assert decode(parts) == decode(ContextProjection.from_state(store.load(), None).messages())
    assert [m["content"] for m in decode(parts) if m["role"] == "user"] == [
        "small",
        "x" * (SEALED_RUN + 5),
        "small again",
    ]


def test_the_pieces_a_request_was_given_never_change_and_cannot_be_written(
    store: SessionStore,
) -> None:
    """A request (or its retry) may still hold the views it was given when the next
    messages are written into the same map: they stay what they were."""
    live = ContextProjection(None)
    store.subscribe(live.apply)
    complete_run(store, "first")
    parts = live.messages()
    before = decode(parts)
    complete_run(store, "second")
    assert decode(parts) == before
    assert len(decode(live.messages())) == 2 * len(before)
    with pytest.raises(TypeError):
        parts[0][0] = ord("[")


# ---------------------------------------------------------------- built when first read


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
    first = decode(projection.messages())
    assert loads == [1]
    assert first == decode(ContextProjection.from_state(store.load(), "be brief").messages())
    # After the build the facts it read are not projected twice; new ones are projected.
    complete_run(store, "after it")
    assert decode(projection.messages()) == decode(
        ContextProjection.from_state(store.load(), "be brief").messages()
    )
    assert len(decode(projection.messages())) == 1 + 2 * 4
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
        projection.messages()
    complete_run(store, "second")
    assert decode(projection.messages()) == decode(
        ContextProjection.from_state(store.load(), None).messages()
    )
    tokens = last_input_tokens(store.load())
    assert tokens is not None and projection.last_input_tokens() == tokens
