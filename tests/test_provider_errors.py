"""Provider against a real HTTP server on 127.0.0.1: what it makes of errors (statuses,
broken streams, timeouts, error objects inside a 200) and of an interrupt while it reads.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from test_provider import (
    USER,
    fail,
    provider_for,
)

from tiny_agent_nb.provider import (
    Provider,
    ProviderConfig,
    ProviderError,
    StreamEvent,
    TextDelta,
)

from helpers.openai_server import (
    OpenAIServer,
    drop_reply,
    error_reply,
    raw_reply,
    stream_error_reply,
    text_reply,
    usage,
)
from helpers.provider_helpers import verbatim

# ---------------------------------------------------------------- errors


def test_429_is_retryable_and_honours_retry_after_seconds(server: OpenAIServer) -> None:
    server.enqueue(
        error_reply(429, "Rate limit exceeded: free-models-per-min", headers={"Retry-After": "7"})
    )
    error = fail(server)
    assert (error.kind, error.status, error.retryable, error.retry_after) == (
        "http",
        429,
        True,
        7.0,
    )
    assert "Rate limit exceeded: free-models-per-min" in error.message
    assert "7s" in error.message


def test_429_honours_retry_after_as_an_http_date(server: OpenAIServer) -> None:
    when = datetime.now(timezone.utc) + timedelta(seconds=120)
    server.enqueue(error_reply(429, headers={"Retry-After": format_datetime(when, usegmt=True)}))
    error = fail(server)
    assert error.retry_after is not None and 100 < error.retry_after <= 121


@pytest.mark.parametrize("status", [500, 502, 503, 504, 529, 599])
def test_server_errors_are_retryable(server: OpenAIServer, status: int) -> None:
    server.enqueue(error_reply(status, "upstream exploded"))
    error = fail(server)
    assert (error.kind, error.status, error.retryable) == ("http", status, True)
    assert "upstream exploded" in error.message and "retried" in error.message
    said = "The server is overloaded" if status in (503, 529) else "The server failed"
    assert error.message.startswith(f"{said} (HTTP {status}: "), error.message


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_names_the_variable_to_set(server: OpenAIServer, status: int) -> None:
    server.enqueue(error_reply(status, "Invalid credentials"))
    error = fail(
        server, api_key="sk-or-v1-abc", api_key_source="TINY_AGENT_API_KEY or OPENROUTER_API_KEY"
    )
    assert (error.status, error.retryable) == (status, False)
    assert "Set TINY_AGENT_API_KEY or OPENROUTER_API_KEY to a valid key" in error.message
    assert "Invalid credentials" in error.message
    assert "sk-or-v1-abc" not in error.message


def test_a_missing_key_says_none_is_set() -> None:
    with OpenAIServer(api_key="sk-required") as server:
        error = fail(server, api_key_source="OPENROUTER_API_KEY")
    assert error.status == 401 and not error.retryable
    assert "none is set" in error.message and "Set OPENROUTER_API_KEY" in error.message


def test_402_says_there_are_no_credits(server: OpenAIServer) -> None:
    server.enqueue(
        error_reply(402, "Insufficient credits. Add more using https://openrouter.ai/credits")
    )
    error = fail(server)
    assert (error.status, error.retryable) == (402, False)
    assert "No credits" in error.message and "Insufficient credits" in error.message


def test_404_names_the_model_and_the_base_url(server: OpenAIServer) -> None:
    server.enqueue(error_reply(404, "No endpoints found for acme/nope."))
    error = fail(server, model="acme/nope")
    assert (error.status, error.retryable) == (404, False)
    assert "'acme/nope'" in error.message and server.base_url in error.message
    assert "No endpoints found" in error.message


def test_a_wrong_base_url_gets_a_real_404_that_says_so(server: OpenAIServer) -> None:
    config = ProviderConfig(model="m", base_url=f"http://127.0.0.1:{server.port}/api")
    with Provider(config) as p, pytest.raises(ProviderError) as info:
        p.complete(verbatim(USER), [])
    assert info.value.status == 404 and "base URL" in info.value.message


def test_400_passes_the_servers_message(server: OpenAIServer) -> None:
    message = "This model's maximum context length is 8192 tokens. However, you requested 9000."
    server.enqueue(error_reply(400, message))
    error = fail(server)
    assert (error.status, error.retryable) == (400, False)
    assert message in error.message


def test_a_long_server_message_is_truncated(server: OpenAIServer) -> None:
    server.enqueue(error_reply(400, "x" * 10_000))
    error = fail(server)
    assert len(error.message) < 800


def test_an_html_error_page_is_not_quoted(server: OpenAIServer) -> None:
    server.enqueue(
        raw_reply("<html><body>Bad Gateway</body></html>", status=502, content_type="text/html")
    )
    error = fail(server)
    assert error.retryable and "HTML" in error.message and "<html>" not in error.message


def test_a_connection_dropped_mid_stream_is_a_retryable_network_error(
    server: OpenAIServer,
) -> None:
    server.enqueue(drop_reply("This answer will never finish, sadly.", after=4))
    events: list[StreamEvent] = []
    with provider_for(server) as provider, pytest.raises(ProviderError) as info:
        provider.complete(verbatim(USER), [], on_event=events.append)
    assert (info.value.kind, info.value.retryable) == ("network", True)
    assert events and all(isinstance(e, TextDelta) for e in events)  # shown before the drop
    assert server.requests[0].outcome == "dropped"


def test_a_stream_that_stops_without_finish_or_done_is_incomplete(server: OpenAIServer) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "half an ans"}, "finish_reason": None}]}
    server.enqueue(raw_reply(f"data: {json.dumps(chunk)}\n\n"))
    error = fail(server)
    assert (error.kind, error.retryable) == ("network", True)


def test_a_silent_server_is_a_retryable_timeout(server: OpenAIServer) -> None:
    never = threading.Event()
    server.enqueue(text_reply("too late", hold=never))
    error = fail(server, read_timeout=0.2)
    assert (error.kind, error.retryable, error.status) == ("timeout", True, None)
    assert "0.2s" in error.message


def test_a_server_that_stalls_mid_stream_is_a_timeout(server: OpenAIServer) -> None:
    never = threading.Event()
    server.enqueue(text_reply("first words then silence", hold=never, hold_after=3))
    events: list[StreamEvent] = []
    with provider_for(server, read_timeout=0.2) as provider, pytest.raises(ProviderError) as info:
        provider.complete(verbatim(USER), [], on_event=events.append)
    assert info.value.kind == "timeout" and info.value.retryable
    assert events


def test_a_refused_connection_is_a_retryable_network_error() -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = ProviderConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1")
    with Provider(config) as provider, pytest.raises(ProviderError) as info:
        provider.complete(verbatim(USER), [])
    assert (info.value.kind, info.value.retryable) == ("network", True)
    assert "Could not connect" in info.value.message


@pytest.mark.parametrize(("code", "retryable"), [(502, True), ("server_error", True), (400, False)])
def test_an_error_object_inside_a_200_stream_raises(
    server: OpenAIServer, code: object, retryable: bool
) -> None:
    server.enqueue(
        stream_error_reply("partial answer", after=3, code=code, message="Provider disconnected")
    )
    error = fail(server)
    assert (error.kind, error.retryable) == ("http", retryable)
    assert error.status == (code if isinstance(code, int) else None)
    assert "Provider disconnected" in error.message


def test_an_error_object_inside_a_200_json_answer_raises(server: OpenAIServer) -> None:
    body = {"error": {"code": 503, "message": "No instances available"}}
    server.enqueue(raw_reply(json.dumps(body), content_type="application/json"))
    error = fail(server, stream=False)
    assert (error.status, error.retryable) == (503, True)


@pytest.mark.parametrize(
    ("reply", "stream"),
    [
        (drop_reply("billed, then cut", after=4, usage_every_chunk=True), True),
        (
            text_reply(
                "billed, then an error",
                usage_every_chunk=True,
                error_after={"after": 4, "error": {"code": 502, "message": "upstream died"}},
            ),
            True,
        ),
        (
            raw_reply(
                json.dumps({"id": "x", "choices": [], "usage": usage(30, 2, cost=0.01)}),
                content_type="application/json",
            ),
            False,
        ),
    ],
    ids=["dropped", "error-chunk", "json-without-choice"],
)
def test_a_failed_answer_carries_the_usage_it_reported(
    server: OpenAIServer, reply: dict[str, Any], stream: bool
) -> None:
    server.enqueue(reply)
    error = fail(server, stream=stream)
    assert error.usage is not None and error.usage.input_tokens in (12, 30)


def test_a_failed_answer_that_reported_no_usage_carries_none(server: OpenAIServer) -> None:
    server.enqueue(drop_reply("cut before any usage", after=3))
    assert fail(server).usage is None


@pytest.mark.parametrize(
    ("body", "content_type", "retryable"),
    [
        (": OPENROUTER PROCESSING\n\ndata: [DONE]\n\n", "text/event-stream", True),
        ('data: {"id": "x", "choices": []}\n\ndata: [DONE]\n\n', "text/event-stream", True),
        ("data: {not json}\n\n", "text/event-stream", True),
        ('{"choices": [', "application/json", True),
        ("<!doctype html><title>Welcome</title>", "text/html", False),
        ("", "application/json", True),
        ("[1, 2, 3]", "application/json", False),
    ],
    ids=["only-comments", "no-choice", "bad-event", "broken-json", "html", "empty", "json-array"],
)
def test_an_answer_that_is_not_a_chat_completion_is_a_protocol_error(
    server: OpenAIServer, body: str, content_type: str, retryable: bool
) -> None:
    server.enqueue(raw_reply(body, content_type=content_type))
    error = fail(server)
    assert (error.kind, error.retryable) == ("protocol", retryable)


# ---------------------------------------------------------------- interrupts


class SpyTransport(httpx.HTTPTransport):
    """Counts response streams closed, to see that an interrupt closes the response."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        inner, spy = response.stream, self
        assert isinstance(inner, httpx.SyncByteStream)
        sync_inner: httpx.SyncByteStream = inner

        class Stream(httpx.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                return iter(sync_inner)

            def close(self) -> None:
                spy.closed += 1
                sync_inner.close()

        response.stream = Stream()
        return response


def test_keyboard_interrupt_in_on_event_propagates_and_closes_the_response(
    server: OpenAIServer,
) -> None:
    held = threading.Event()
    server.enqueue(text_reply("a long answer the user does not want", hold=held, hold_after=3))
    server.enqueue(text_reply("next"))
    transport = SpyTransport()

    def interrupt(event: StreamEvent) -> None:
        raise KeyboardInterrupt

    with Provider(ProviderConfig(model="m", base_url=server.base_url), transport=transport) as p:
        with pytest.raises(KeyboardInterrupt):
            p.complete(verbatim(USER), [], on_event=interrupt)
        assert transport.closed == 1
        held.set()
        assert server.requests[0].finished.wait(10)
        assert p.complete(verbatim(USER), []).message.content == "next"  # the client still works


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals go to main"
)
@pytest.mark.usefixtures("sigint_raises")
def test_keyboard_interrupt_while_blocked_reading_propagates(server: OpenAIServer) -> None:
    held = threading.Event()
    server.enqueue(
        text_reply("first words, then the kernel is interrupted", hold=held, hold_after=3)
    )
    transport = SpyTransport()
    sent: list[threading.Thread] = []

    def on_event(event: StreamEvent) -> None:
        if not sent:  # the server now holds: the main thread will block reading
            sent.append(threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT)))
            sent[0].start()

    config = ProviderConfig(model="m", base_url=server.base_url)
    with Provider(config, transport=transport) as p, pytest.raises(KeyboardInterrupt):
        p.complete(verbatim(USER), [], on_event=on_event)
    sent[0].join()
    assert transport.closed == 1
