"""Provider against a real HTTP server on 127.0.0.1 speaking the chat-completions wire format."""

from __future__ import annotations

import json
from typing import Any

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
)
from tiny_agent_nb.tools import ToolSchema

from helpers.openai_server import (
    OpenAIServer,
    completion_reply,
    raw_reply,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage,
)
from helpers.provider_helpers import verbatim

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
        completion = provider.complete(
            verbatim(*(messages or [USER])), tools or [], on_event=events.append
        )
    return completion, events


def fail(server: OpenAIServer, **config: Any) -> ProviderError:
    with provider_for(server, **config) as provider, pytest.raises(ProviderError) as info:
        provider.complete(verbatim(USER), [])
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
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file.",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                },
            }
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "max_tokens": 512,
    }
    assert "tools" not in without
    assert all(r.path == "/v1/chat/completions" for r in server.requests)
    assert server.requests[0].headers["content-type"] == "application/json"


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
        provider.complete(
            verbatim(USER, json.dumps(assistant).encode(), json.dumps(tool).encode()), []
        )
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
        provider.complete(verbatim(USER, json.dumps(assistant).encode(), USER), [])
    assert info.value.status == 400 and info.value.kind == "http"
    assert "did not have response messages: call_9" in info.value.message
