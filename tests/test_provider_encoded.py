"""What the OpenAI-compatible provider sends of a context's history: the canonical JSON
each message was kept as when it was projected, joined as it is; and what a provider of
another wire shape reads of the same context: the messages those bytes encode."""

from __future__ import annotations

import json

from tiny_agent_nb.agent import ContextProjection
from tiny_agent_nb.provider import encoded, messages
from tiny_agent_nb.session import SessionStore

from helpers.scenario import complete_run


def decode(parts: list[bytes]) -> list[dict[str, object]]:
    return json.loads(b"[" + b",".join(parts) + b"]")  # type: ignore[no-any-return]


def test_a_followed_projection_sends_what_a_rebuild_sends(store: SessionStore) -> None:
    live = ContextProjection(None)
    store.subscribe(live.apply)
    for i in range(40):
        complete_run(store, f"{i} " + "long prompt " * 100)
    parts = encoded(live.context())
    rebuilt = encoded(ContextProjection.from_state(store.load(), None).context())
    assert parts == rebuilt
    assert len(decode(parts)) == 40 * 4  # prompt, call, result, answer


def test_iterating_a_context_gives_the_messages_its_history_holds(store: SessionStore) -> None:
    """A provider that reads messages (the offline demo, another wire shape) is given
    what the bytes encode: the same request, message for message."""
    complete_run(store, "first")
    complete_run(store, "second")
    context = ContextProjection.from_state(store.load(), "be brief").context()
    listed = list(context)
    assert [messages.canonical(message) for message in listed] == encoded(context)
    assert isinstance(listed[0], messages.System)
    assert any(isinstance(m, messages.Assistant) and m.tool_calls for m in listed)


def test_the_pieces_a_request_was_given_never_change(store: SessionStore) -> None:
    """A request (or its retry) may still hold its pieces when the next messages are
    kept: they stay what they were."""
    live = ContextProjection(None)
    store.subscribe(live.apply)
    complete_run(store, "first")
    parts = encoded(live.context())
    before = decode(parts)
    complete_run(store, "second")
    assert decode(parts) == before
    assert len(decode(encoded(live.context()))) == 2 * len(before)
