"""The OpenAI-compatible provider's encoding cache of a context's history: each message
encoded once, into memory maps of SEALED_RUN bytes, sent as read-only views of them."""

from __future__ import annotations

import json

import pytest

from tiny_agent_nb.agent import ContextProjection
from tiny_agent_nb.provider import encoded, wire
from tiny_agent_nb.provider._wire import SEALED_RUN
from tiny_agent_nb.session import SessionStore

from helpers.scenario import complete_run


def decode(parts: list[wire.Encoded]) -> list[dict[str, object]]:
    return json.loads(b"[" + b",".join(parts) + b"]")  # type: ignore[no-any-return]


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
    parts = encoded(live.context())
    total = sum(len(part) for part in parts)
    assert total > 4 * SEALED_RUN
    assert max(len(part) for part in parts) <= SEALED_RUN
    assert min(len(part) for part in parts[:-1]) > SEALED_RUN - 13_000  # each map filled
    assert len(parts) == total // SEALED_RUN + 1
    rebuilt = encoded(ContextProjection.from_state(store.load(), None).context())
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
    parts = encoded(live.context())
    assert len(parts) == 3 and len(parts[1]) > SEALED_RUN
    assert decode(parts) == decode(
        encoded(ContextProjection.from_state(store.load(), None).context())
    )
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
    parts = encoded(live.context())
    before = decode(parts)
    complete_run(store, "second")
    assert decode(parts) == before
    assert len(decode(encoded(live.context()))) == 2 * len(before)
    with pytest.raises(TypeError):
        parts[0][0] = ord("[")


# ---------------------------------------------------------------- built when first read
