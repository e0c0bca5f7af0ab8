"""While a loopback server holds its answer, the provider tells whoever follows the
events that it is waiting (`Waiting`, with the seconds since the request was sent), on
the thread that made the request, and the answer still arrives whole: the read's wait is
cut into slices, none of which takes anything from the connection. The read timeout
still counts from the read's start, not from the last slice."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tiny_agent_nb.provider import (
    Provider,
    ProviderConfig,
    ProviderError,
    StreamEvent,
    TextDelta,
    Waiting,
)

from helpers.openai_server import OpenAIServer, text_reply
from helpers.provider_helpers import verbatim

pytestmark = pytest.mark.xdist_group("provider_limits")  # they wait on sockets

USER = json.dumps({"role": "user", "content": "Take your time."}).encode()
ANSWER = "Thought it over, at length."


def provider_for(server: OpenAIServer, **config: Any) -> Provider:
    return Provider(ProviderConfig(model="test/model", base_url=server.base_url, **config))


@pytest.mark.parametrize(
    ("where", "stream"),
    [("before its head", True), ("before its head", False), ("after its first text", True)],
)
def test_a_held_answer_is_told_as_waiting_then_arrives_whole(
    server: OpenAIServer, where: str, stream: bool
) -> None:
    release = threading.Event()
    hold_after = 3 if where == "after its first text" else None
    server.enqueue(text_reply(ANSWER, hold=release, hold_after=hold_after))
    events: list[StreamEvent] = []
    threads: set[threading.Thread] = set()

    def on_event(event: StreamEvent) -> None:
        events.append(event)
        threads.add(threading.current_thread())
        if sum(isinstance(e, Waiting) for e in events) == 2:
            release.set()  # told twice: the answer may come

    with provider_for(server, stream=stream) as provider:
        completion = provider.complete(verbatim(USER), [], on_event=on_event)

    assert completion.message.content == ANSWER
    assert threads == {threading.current_thread()}
    seconds = [e.seconds for e in events if isinstance(e, Waiting)]
    assert len(seconds) >= 2 and seconds == sorted(seconds) and seconds[0] > 0
    texts = [i for i, e in enumerate(events) if isinstance(e, TextDelta)]
    waits = [i for i, e in enumerate(events) if isinstance(e, Waiting)]
    if hold_after is None:  # nothing of the answer came before the wait
        assert max(waits) < min(texts)
    else:
        assert min(texts) < min(waits) < max(texts)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == ANSWER


def test_the_read_timeout_cuts_a_silent_server_whose_wait_is_told(
    server: OpenAIServer,
) -> None:
    """Each slice of the wait is shorter than the read timeout: were each one to start it
    again, the request would wait for the held answer (hold_timeout) and get it."""
    server.hold_timeout = 60.0
    server.enqueue(text_reply(ANSWER, hold=threading.Event()))
    events: list[StreamEvent] = []
    with (
        provider_for(server, read_timeout=2.5, attempt_timeout=600.0) as provider,
        pytest.raises(ProviderError) as failed,
    ):
        provider.complete(verbatim(USER), [], on_event=events.append)
    assert failed.value.kind == "timeout", failed.value
    assert events and all(isinstance(e, Waiting) for e in events)
