"""Provider against a real HTTP server on 127.0.0.1 speaking the chat-completions wire format."""

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

from tiny_agent_nb.provider import (
    Completion,
    Provider,
    ProviderConfig,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallStarted,
    UsageReport,
    wire,
)
from tiny_agent_nb.tools import ToolSchema

from helpers.openai_server import (
    OpenAIServer,
    completion_reply,
    drop_reply,
    error_reply,
    raw_reply,
    stream_error_reply,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage,
)

USER = b'{"role":"user","content":"Fix the failing test."}'
READ = ToolSchema(
    name="read_file",
    version="1",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)


def provider_for(server: OpenAIServer, **config: Any) -> Provider:
    config.setdefault("model", "test/model")
    return Provider(ProviderConfig(base_url=server.base_url, **config))


def ask(
    server: OpenAIServer,
    *,
    messages: list[bytes] | None = None,
    tools: list[ToolSchema] | None = None,
    **config: Any,
) -> tuple[Completion, list[StreamEvent]]:
    events: list[StreamEvent] = []
    with provider_for(server, **config) as provider:
        completion = provider.complete(messages or [USER], tools or [], on_event=events.append)
    return completion, events


def fail(server: OpenAIServer, **config: Any) -> ProviderError:
    with provider_for(server, **config) as provider, pytest.raises(ProviderError) as info:
        provider.complete([USER], [])
    assert len(server.requests) == 1, "one complete() is exactly one HTTP request"
    return info.value


# ---------------------------------------------------------------- answers


def test_streamed_text_arrives_as_deltas_and_settles(server: OpenAIServer) -> None:
    server.enqueue(text_reply("The test fails because parse() drops the last line."))
    completion, events = ask(server)
    message = completion.message
    assert message.content == "The test fails because parse() drops the last line."
    assert message.finishReason == "stop"
    assert message.toolCalls == () and message.reasoning is None and message.refusal is None
    assert len(events) > 5 and all(isinstance(e, TextDelta) for e in events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == message.content
    assert completion.usage == UsageReport(input_tokens=12, output_tokens=5)
    assert completion.model == "test/model"
    assert completion.response_id is not None and completion.response_id.startswith("gen-")


def test_streamed_tool_call_arguments_split_across_chunks(server: OpenAIServer) -> None:
    arguments = {"path": "tests/test_parse.py", "limit": 200, "note": "ünïcödé ✓"}
    server.enqueue(
        tool_calls_reply(tool_call("call_1", "read_file", arguments), chunk_size=2, split_bytes=7)
    )
    completion, events = ask(server, tools=[READ])
    (call,) = completion.message.toolCalls
    assert (call.id, call.name, call.arguments, call.invalidArguments) == (
        "call_1",
        "read_file",
        arguments,
        None,
    )
    assert completion.message.finishReason == "tool_calls"
    assert completion.message.content is None
    assert events == [ToolCallStarted(0, "call_1", "read_file")]


@pytest.mark.parametrize("interleave", [False, True], ids=["sequential", "interleaved"])
def test_two_parallel_tool_calls_are_assembled_by_index(
    server: OpenAIServer, interleave: bool
) -> None:
    server.enqueue(
        tool_calls_reply(
            tool_call("call_a", "read_file", {"path": "a.py"}),
            tool_call("call_b", "bash", {"command": "pytest -q tests/test_parse.py"}),
            interleave=interleave,
        )
    )
    completion, events = ask(server, tools=[READ])
    calls = completion.message.toolCalls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_a", "read_file", {"path": "a.py"}),
        ("call_b", "bash", {"command": "pytest -q tests/test_parse.py"}),
    ]
    assert events == [
        ToolCallStarted(0, "call_a", "read_file"),
        ToolCallStarted(1, "call_b", "bash"),
    ]


SERVER_QUIRKS = [
    {},
    {"omit_index": True},
    {"repeat_id_name": True},
    {"whole_tool_calls": True},
    {"null_content": True},
    {"data_prefix": "data:"},
    {"newline": "\r\n"},
    {"comments": True},
    {"usage_every_chunk": True},
    {"finish_with_last": True},
    {"done": False},
    {"split_bytes": 1},
    {"chunk_size": 1000},
]


@pytest.mark.parametrize("quirk", SERVER_QUIRKS, ids=lambda q: ",".join(q) or "plain")
def test_server_dialects_normalize_to_the_same_message(
    server: OpenAIServer, quirk: dict[str, Any]
) -> None:
    calls = (
        tool_call("call_a", "read_file", {"path": "a.py"}),
        tool_call("call_b", "bash", {"command": "ls -la"}),
    )
    server.enqueue(
        tool_calls_reply(*calls, content="Let me look.", **quirk),
        tool_calls_reply(*calls, content="Let me look."),
    )
    quirky, _ = ask(server)
    plain, _ = ask(server)
    assert quirky.message == plain.message
    assert [c.arguments for c in quirky.message.toolCalls] == [
        {"path": "a.py"},
        {"command": "ls -la"},
    ]
    assert quirky.usage == plain.usage


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_reasoning_from_either_field(server: OpenAIServer, field: str, stream: bool) -> None:
    server.enqueue(text_reply("Answer: 42.", reasoning="Six times seven.", reasoning_field=field))
    completion, events = ask(server, stream=stream)
    assert completion.message.reasoning == "Six times seven."
    assert completion.message.content == "Answer: 42."
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == "Six times seven."
    assert isinstance(events[0], ReasoningDelta)  # reasoning is shown before the answer


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_refusal_is_kept_apart_from_content(server: OpenAIServer, stream: bool) -> None:
    server.enqueue(completion_reply(refusal="I can't help with that.", finish_reason="stop"))
    completion, _ = ask(server, stream=stream)
    assert completion.message.refusal == "I can't help with that."
    assert completion.message.content is None


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (usage(100, 20, cost=0.00042), UsageReport(100, 20, 0, 0, 0.00042)),
        (usage(100, 20), UsageReport(100, 20, 0, 0, None)),
        (usage(100, 20, cached=64, reasoning=12, cost=0), UsageReport(100, 20, 12, 64, 0.0)),
        (None, None),
    ],
    ids=["with-cost", "without-cost", "cached-and-reasoning", "absent"],
)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_usage_is_normalized_and_absent_usage_is_unknown(
    server: OpenAIServer, wire: dict[str, Any] | None, expected: UsageReport | None, stream: bool
) -> None:
    server.enqueue(text_reply("ok", usage=wire))
    completion, _ = ask(server, stream=stream)
    assert completion.usage == expected


def test_non_stream_mode_sends_no_stream_options_and_gives_the_same_message(
    server: OpenAIServer,
) -> None:
    reply: dict[str, Any] = {
        "content": "Done.",
        "reasoning": "Checked.",
        "tool_calls": [tool_call("c1", "bash", {"command": "ls"})],
    }
    server.enqueue(completion_reply(**reply), completion_reply(**reply))
    streamed, _ = ask(server)
    whole, events = ask(server, stream=False)
    assert whole.message == streamed.message
    assert whole.usage == streamed.usage
    body = server.requests[1].body
    assert body["stream"] is False and "stream_options" not in body
    assert events == [
        ReasoningDelta("Checked."),
        TextDelta("Done."),
        ToolCallStarted(0, "c1", "bash"),
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("raw", ['{"path": "a.py"', "[1, 2]", "not json", '"a string"', "{'a': 1}"])
def test_malformed_tool_arguments_are_kept_not_raised(
    server: OpenAIServer, raw: str, stream: bool
) -> None:
    server.enqueue(tool_calls_reply(tool_call("c1", "read_file", raw), tool_call("c2", "bash", "")))
    completion, _ = ask(server, stream=stream)
    bad, empty = completion.message.toolCalls
    assert (bad.arguments, bad.invalidArguments) == ({}, raw)
    assert (empty.arguments, empty.invalidArguments) == ({}, None)


def test_a_server_that_ignores_stream_true_and_answers_json_is_understood(
    server: OpenAIServer,
) -> None:
    body = {
        "choices": [
            {"message": {"role": "assistant", "content": "plain JSON"}, "finish_reason": "stop"}
        ]
    }
    server.enqueue(raw_reply(json.dumps(body), content_type="application/json"))
    completion, events = ask(server)
    assert completion.message.content == "plain JSON"
    assert completion.usage is None
    assert events == [TextDelta("plain JSON")]


def test_a_server_that_streams_without_a_content_type_is_understood(server: OpenAIServer) -> None:
    chunk = {"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]}
    server.enqueue(raw_reply(f"data: {json.dumps(chunk)}\ndata: [DONE]\n", content_type=None))
    completion, _ = ask(server, stream=False)
    assert completion.message.content == "hi"


# ---------------------------------------------------------------- the request


def test_request_body_shape(server: OpenAIServer) -> None:
    server.enqueue(text_reply("a"), text_reply("b"))
    ask(server, tools=[READ], temperature=0.2, max_tokens=512)
    ask(server)
    with_tools, without = (r.body for r in server.requests)
    assert with_tools == {
        "model": "test/model",
        "messages": [{"role": "user", "content": "Fix the failing test."}],
        "tools": [wire.tool_definition(READ)],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "max_tokens": 512,
    }
    assert "tools" not in without
    assert all(r.path == "/v1/chat/completions" for r in server.requests)
    assert server.requests[0].headers["content-type"] == "application/json"


def test_history_bytes_are_spliced_in_verbatim(server: OpenAIServer) -> None:
    odd = [b'{"role": "system",   "content": "Be brief."}', b'{"content":"h\\u00e9","role":"user"}']
    server.enqueue(text_reply("ok"))
    ask(server, messages=odd)
    raw = server.requests[0].raw
    assert b'"messages":[' + b",".join(odd) + b"]" in raw


def test_no_authorization_header_without_a_key(server: OpenAIServer) -> None:
    server.enqueue(text_reply("ok"), text_reply("ok"))
    ask(server)
    ask(server, api_key="")  # an empty variable is no key
    assert all("authorization" not in r.headers for r in server.requests)


def test_bearer_key_when_a_key_is_set() -> None:
    with OpenAIServer(api_key="sk-test-123") as server:
        server.enqueue(text_reply("ok"))
        ask(server, api_key="sk-test-123")
        assert server.requests[0].headers["authorization"] == "Bearer sk-test-123"


def test_extra_headers_are_sent(server: OpenAIServer) -> None:
    server.enqueue(text_reply("ok"))
    ask(server, extra_headers={"HTTP-Referer": "https://example.org", "X-Title": "nb"})
    headers = server.requests[0].headers
    assert (headers["http-referer"], headers["x-title"]) == ("https://example.org", "nb")


def test_a_tool_round_trip_with_empty_content_is_accepted(server: OpenAIServer) -> None:
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        ],
    }
    tool = {"role": "tool", "tool_call_id": "c1", "content": "file text"}
    server.enqueue(text_reply("Fixed."))
    completion, _ = ask(
        server, messages=[USER, json.dumps(assistant).encode(), json.dumps(tool).encode()]
    )
    assert completion.message.content == "Fixed."


def test_content_null_beside_tool_calls_is_rejected_like_real_servers(
    server: OpenAIServer,
) -> None:
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        ],
    }
    tool = {"role": "tool", "tool_call_id": "c1", "content": "file text"}
    server.enqueue(text_reply("never sent"))
    with provider_for(server) as provider, pytest.raises(ProviderError) as info:
        provider.complete([USER, json.dumps(assistant).encode(), json.dumps(tool).encode()], [])
    assert info.value.status == 400 and not info.value.retryable
    assert "content null" in info.value.message
    assert server.pending_replies == 1


def test_an_unanswered_tool_call_is_rejected_with_the_servers_words(
    server: OpenAIServer,
) -> None:
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        ],
    }
    with provider_for(server) as provider, pytest.raises(ProviderError) as info:
        provider.complete([USER, json.dumps(assistant).encode(), USER], [])
    assert info.value.status == 400 and info.value.kind == "http"
    assert "did not have response messages: call_9" in info.value.message


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
        p.complete([USER], [])
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
        provider.complete([USER], [], on_event=events.append)
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
        provider.complete([USER], [], on_event=events.append)
    assert info.value.kind == "timeout" and info.value.retryable
    assert events


def test_a_refused_connection_is_a_retryable_network_error() -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = ProviderConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1")
    with Provider(config) as provider, pytest.raises(ProviderError) as info:
        provider.complete([USER], [])
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
            p.complete([USER], [], on_event=interrupt)
        assert transport.closed == 1
        held.set()
        assert server.requests[0].finished.wait(10)
        assert p.complete([USER], []).message.content == "next"  # the client still works


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
        p.complete([USER], [], on_event=on_event)
    sent[0].join()
    assert transport.closed == 1
