"""Wire responses of different servers normalize to one canonical assistant message."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from tiny_agent_nb.provider import (
    Provider,
    ProviderConfig,
    ProviderError,
    ReasoningDelta,
    TextDelta,
    ToolCallStarted,
    UsageReport,
)
from tiny_agent_nb.provider._errors import server_message
from tiny_agent_nb.provider._normalize import (
    MAX_TOOL_CALLS,
    CompletionAssembler,
    completion_from_response,
    parse_arguments,
    usage_from_wire,
)
from tiny_agent_nb.provider._text import INVALID_ARGUMENTS_LIMIT
from tiny_agent_nb.session import MAX_JSON_DEPTH, canonical_json

from helpers.openai_server import OpenAIServer, raw_reply
from helpers.provider_helpers import verbatim


def chunk(
    delta: Mapping[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": dict(delta or {}), "finish_reason": finish}], **extra}


def assemble(*chunks: Mapping[str, Any]) -> tuple[Any, list[Any]]:
    assembler = CompletionAssembler()
    events = [e for c in chunks for e in assembler.add_chunk(c)]
    return assembler.result(), events


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"path": "a.py"}', ({"path": "a.py"}, None)),
        ("", ({}, None)),
        ("  \n", ({}, None)),
        (None, ({}, None)),
        ({"already": "parsed"}, ({"already": "parsed"}, None)),
        ('{"path": "a.py"', ({}, '{"path": "a.py"')),
        ("[1, 2]", ({}, "[1, 2]")),
        ("null", ({}, "null")),
        ('{"x": NaN}', ({}, '{"x": NaN}')),
        ("Infinity", ({}, "Infinity")),
        ([1, 2], ({}, "[1, 2]")),
    ],
)
def test_parse_arguments(raw: object, expected: tuple[dict[str, Any], str | None]) -> None:
    assert parse_arguments(raw) == expected


def test_absurdly_nested_arguments_are_invalid_not_a_crash() -> None:
    raw = "[" * 200_000
    assert parse_arguments(raw) == ({}, kept(raw))
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    assert parse_arguments(deep) == ({}, kept(deep))


def kept(raw: str) -> str:
    return raw[:INVALID_ARGUMENTS_LIMIT] + f"… [cut: {len(raw)} characters in all]"


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 200, 300])
def test_arguments_nested_deeper_than_the_session_allows_are_invalid(depth: int) -> None:
    raw = json.dumps(nested(depth))
    assert parse_arguments(raw) == ({}, raw)  # the model is told; the entry still commits
    arguments, invalid = parse_arguments(nested(depth))  # a server that sends the object
    assert (arguments, invalid) == ({}, raw)


def test_arguments_exactly_as_deep_as_the_session_allows_are_kept() -> None:
    value = nested(MAX_JSON_DEPTH)
    assert parse_arguments(json.dumps(value)) == (value, None)
    assert parse_arguments(value) == (value, None)


@pytest.mark.parametrize(
    "raw",
    ['{"x": 1e400}', '{"x": -1e999}', '{"x": ' + "9" * 700 + "}"],
    ids=["overflow-to-infinity", "negative-infinity", "700-digit-integer"],
)
def test_arguments_the_session_cannot_keep_are_invalid_not_a_refused_commit(raw: str) -> None:
    """JSON that Python reads (1e400 as inf, a 700-digit int) but the store refuses: the
    model is told, instead of its whole answer failing to commit."""
    assert parse_arguments(raw) == ({}, raw)
    assert parse_arguments(json.loads(raw)) == (
        {},
        raw.replace("1e400", "Infinity").replace("-1e999", "-Infinity"),
    )


def test_unusable_arguments_are_cut_to_a_bounded_size() -> None:
    raw = '{"content": "' + "x" * 5_000_000  # a huge write_file call, never closed
    arguments, invalid = parse_arguments(raw)
    assert arguments == {}
    assert invalid == kept(raw)
    assert len(invalid) < INVALID_ARGUMENTS_LIMIT + 100


def test_split_surrogate_escapes_are_joined_in_arguments() -> None:
    arguments, invalid = parse_arguments('{"emoji": "\\ud83d\\ude00", "lone": "\\ud83d"}')
    assert invalid is None
    assert arguments == {"emoji": "😀", "lone": "\ufffd"}


# ---------------------------------------------------------------- usage


def test_openrouter_usage_with_cost_and_details() -> None:
    wire = {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "total_tokens": 1500,
        "cost": 0.0021,
        "is_byok": False,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 120},
    }
    assert usage_from_wire(wire) == UsageReport(1200, 300, 120, 1024, 0.0021)


def test_byok_cost_adds_the_upstream_charge() -> None:
    wire = {
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "cost": 0.0001,
        "is_byok": True,
        "cost_details": {"upstream_inference_cost": 0.002},
    }
    report = usage_from_wire(wire)
    assert report is not None and report.cost == pytest.approx(0.0021)


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (None, None),
        ({}, None),
        ("12", None),
        ({"total_tokens": 5}, None),
        ({"prompt_tokens": 3, "completion_tokens": 4}, UsageReport(3, 4)),
        (
            {"prompt_tokens": None, "completion_tokens": 4, "prompt_tokens_details": None},
            UsageReport(0, 4),
        ),
        ({"input_tokens": 3, "output_tokens": 4}, UsageReport(3, 4)),
        (
            {"prompt_tokens": 9, "completion_tokens": 1, "prompt_cache_hit_tokens": 8},
            UsageReport(9, 1, 0, 8),
        ),
        ({"prompt_tokens": "7", "completion_tokens": 2.0}, UsageReport(7, 2)),
        ({"prompt_tokens": True, "completion_tokens": -3, "cost": -1}, UsageReport(0, 0)),
        ({"prompt_tokens": 1, "completion_tokens": 1, "cost": "NaN"}, UsageReport(1, 1)),
        ({"cost": 0.5}, UsageReport(cost=0.5)),
    ],
)
def test_usage_shapes(wire: object, expected: UsageReport | None) -> None:
    assert usage_from_wire(wire) == expected


# ---------------------------------------------------------------- assembly


def test_content_reasoning_and_refusal_are_concatenated() -> None:
    completion, events = assemble(
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning": "think ", "reasoning_content": "think "}),  # both: counted once
        chunk({"reasoning_content": "more"}),
        chunk({"content": "Hel", "reasoning": None}),
        chunk({"content": None}),
        chunk({"content": [{"type": "text", "text": "lo"}]}),
        chunk({"refusal": "no "}),
        chunk({"refusal": "way"}),
        chunk({}, "stop"),
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
    )
    m = completion.message
    assert (m.content, m.reasoning, m.refusal, m.finishReason) == (
        "Hello",
        "think more",
        "no way",
        "stop",
    )
    assert events == [
        ReasoningDelta("think "),
        ReasoningDelta("more"),
        TextDelta("Hel"),
        TextDelta("lo"),
    ]
    assert completion.usage == UsageReport(5, 2)


def test_empty_content_normalizes_to_none() -> None:
    completion, _ = assemble(chunk({"role": "assistant", "content": ""}, "stop"))
    assert completion.message.content is None and completion.message.reasoning is None


def test_a_surrogate_pair_split_across_chunks_is_joined() -> None:
    completion, events = assemble(
        chunk({"content": "\ud83d"}), chunk({"content": "\ude00!"}, "stop")
    )
    assert completion.message.content == "😀!"
    assert all("\ud83d" not in e.text for e in events)  # a display never sees a lone half


def test_usage_in_every_chunk_keeps_the_last() -> None:
    completion, _ = assemble(
        chunk({"content": "a"}, usage={"prompt_tokens": 5, "completion_tokens": 1}),
        chunk({"content": "b"}, usage={"prompt_tokens": 5, "completion_tokens": 2}),
        chunk({}, "stop", usage=None),
    )
    assert completion.usage == UsageReport(5, 2)


def test_other_choices_are_ignored() -> None:
    completion, _ = assemble(
        {
            "choices": [
                {"index": 1, "delta": {"content": "other"}},
                {"index": 0, "delta": {"content": "mine"}},
            ]
        },
        chunk({}, "stop"),
    )
    assert completion.message.content == "mine"


def test_tool_calls_streamed_openai_style() -> None:
    completion, events = assemble(
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"pa'}}]}),
        chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "c2", "type": "function", "function": {"name": "bash"}}
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "a"}'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"command": "ls"}'}}]}),
        chunk({}, "tool_calls"),
    )
    calls = completion.message.toolCalls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("c1", "read", {"path": "a"}),
        ("c2", "bash", {"command": "ls"}),
    ]
    assert events == [ToolCallStarted(0, "c1", "read"), ToolCallStarted(1, "c2", "bash")]


def test_parallel_calls_all_numbered_zero_are_told_apart_by_id() -> None:
    completion, _ = assemble(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "read", "arguments": "{}"}}
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c2", "function": {"name": "bash", "arguments": "{"}}
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}),
        chunk({}, "tool_calls"),
    )
    assert [(c.id, c.name, c.arguments) for c in completion.message.toolCalls] == [
        ("c1", "read", {}),
        ("c2", "bash", {}),
    ]


def test_calls_without_index_or_id_are_told_apart_by_name() -> None:
    completion, _ = assemble(
        chunk({"tool_calls": [{"function": {"name": "read", "arguments": '{"path":'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": '"a"}'}}]}),
        chunk({"tool_calls": [{"function": {"name": "read", "arguments": '{"path": "b"}'}}]}),
        chunk({}, "tool_calls"),
    )
    calls = completion.message.toolCalls
    assert [c.arguments for c in calls] == [{"path": "a"}, {"path": "b"}]
    assert calls[0].id != calls[1].id and all(c.id.startswith("call_") for c in calls)


def test_a_missing_id_is_made_up_once_and_announced_with_it() -> None:
    completion, events = assemble(
        chunk({"tool_calls": [{"index": 0, "function": {"name": "read", "arguments": '{"a"'}}]}),
        chunk({"tool_calls": [{"index": 0, "id": "late", "function": {"arguments": ": 1}"}}]}),
        chunk({}, "tool_calls"),
    )
    (call,) = completion.message.toolCalls
    assert call.id.startswith("call_") and call.arguments == {"a": 1}
    assert events == [ToolCallStarted(0, call.id, "read")]


def test_whole_arguments_resent_after_streaming_are_not_doubled() -> None:
    completion, _ = assemble(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "read", "arguments": '{"a":'}}
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "read", "arguments": '{"a": 1}'}}
                ]
            }
        ),
        chunk({}, "tool_calls"),
    )
    (call,) = completion.message.toolCalls
    assert (call.name, call.arguments) == ("read", {"a": 1})


def test_a_name_streamed_in_pieces_is_joined() -> None:
    completion, _ = assemble(
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "read_"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "file", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
    )
    assert completion.message.toolCalls[0].name == "read_file"


def test_an_arguments_object_instead_of_a_string_is_accepted() -> None:
    completion, _ = assemble(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "read", "arguments": {"a": 1}}}
                ]
            }
        ),
        chunk({}, "tool_calls"),
    )
    assert completion.message.toolCalls[0].arguments == {"a": 1}


def test_an_error_object_in_a_chunk_raises() -> None:
    assembler = CompletionAssembler()
    assembler.add_chunk(chunk({"content": "partial"}))
    with pytest.raises(ProviderError) as info:
        assembler.add_chunk(
            {"error": {"code": 502, "message": "Provider disconnected"}, "choices": []}
        )
    assert (info.value.status, info.value.retryable, info.value.kind) == (502, True, "http")


def test_no_choice_at_all_is_a_protocol_error() -> None:
    assembler = CompletionAssembler()
    assembler.add_chunk({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0}})
    with pytest.raises(ProviderError) as info:
        assembler.result()
    assert (info.value.kind, info.value.retryable) == ("protocol", True)


def test_a_non_streamed_response() -> None:
    body = {
        "id": "gen-1",
        "model": "deepseek/deepseek-r1",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "Need the file.",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "read", "arguments": '{"p": 1}'},
                        },
                        {
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "read", "arguments": '{"p": 2}'},
                        },
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
    }
    completion = completion_from_response(body)
    m = completion.message
    assert (m.content, m.reasoning, m.finishReason) == (None, "Need the file.", "tool_calls")
    assert [(c.id, c.arguments) for c in m.toolCalls] == [("c1", {"p": 1}), ("c2", {"p": 2})]
    assert (completion.model, completion.response_id) == ("deepseek/deepseek-r1", "gen-1")
    assert completion.usage == UsageReport(10, 3)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"error": {"message": "bad model", "type": "invalid_request_error"}}, "bad model"),
        ({"error": "model 'x' not found"}, "model 'x' not found"),
        ({"object": "error", "message": "too long", "code": 400}, "too long"),
        ({"detail": "Not Found"}, "Not Found"),
        (
            {"detail": [{"loc": ["body"], "msg": "field required"}]},
            '[{"loc": ["body"], "msg": "field required"}]',
        ),
        (
            {
                "error": {
                    "message": "Provider returned error",
                    "metadata": {"raw": "quota", "provider_name": "Acme"},
                }
            },
            "Provider returned error (Acme: quota)",
        ),
        ({"unrelated": 1}, None),
        ([1], None),
    ],
)
def test_server_message_shapes(body: object, expected: str | None) -> None:
    assert server_message(body) == expected


# ---------------------------------------------------------------- text the store can write

LONE = "\\ud800"  # a JSON escape of half a surrogate pair: valid JSON, not valid UTF-8


def lone_surrogate_chunk() -> str:
    """A stream chunk with a lone surrogate escape in every text the model chooses."""
    call = (
        f'{{"index":0,"id":"call_{LONE}","type":"function","function":'
        f'{{"name":"read{LONE}","arguments":"{{\\"p{LONE}\\":\\"x{LONE}\\"}}"}}}}'
    )
    delta = (
        f'{{"content":"hi{LONE}","reasoning":"think{LONE}","refusal":"no{LONE}",'
        f'"tool_calls":[{call}]}}'
    )
    return (
        f'{{"id":"gen{LONE}","model":"m{LONE}","choices":[{{"index":0,"delta":{delta},'
        f'"finish_reason":"tool_calls{LONE}"}}]}}'
    )


def strings_in(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings_in(k), *strings_in(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in strings_in(v)]
    return []


def test_lone_surrogates_anywhere_in_a_streamed_answer_become_replacement_characters(
    server: OpenAIServer,
) -> None:
    server.enqueue(raw_reply(f"data: {lone_surrogate_chunk()}\n\ndata: [DONE]\n\n"))
    events: list[Any] = []
    config = ProviderConfig(model="m", base_url=server.base_url)
    with Provider(config) as provider:
        completion = provider.complete(
            verbatim(b'{"role":"user","content":"hi"}'), [], on_event=events.append
        )
    message = completion.message.model_dump()
    texts = [
        *strings_in(message),
        completion.model,
        completion.response_id,
        *strings_in([vars(e) for e in events]),
    ]
    for text in texts:
        assert isinstance(text, str)
        text.encode("utf-8")  # what the store does with it: must not raise
    assert message["content"] == "hi\ufffd"
    assert message["reasoning"] == "think\ufffd" and message["refusal"] == "no\ufffd"
    assert message["finishReason"] == "tool_calls\ufffd"
    (call,) = message["toolCalls"]
    assert (call["id"], call["name"]) == ("call_\ufffd", "read\ufffd")
    assert call["arguments"] == {"p\ufffd": "x\ufffd"}
    canonical_json(message).encode("utf-8")


def test_a_non_streamed_answer_with_lone_surrogates_is_valid_utf8(server: OpenAIServer) -> None:
    body = lone_surrogate_chunk().replace('"delta":', '"message":')
    server.enqueue(raw_reply(body, content_type="application/json"))
    config = ProviderConfig(model="m", base_url=server.base_url, stream=False)
    with Provider(config) as provider:
        completion = provider.complete(verbatim(b'{"role":"user","content":"hi"}'), [])
    canonical_json(completion.message.model_dump()).encode("utf-8")
    assert completion.message.toolCalls[0].id == "call_\ufffd"


def test_an_answer_with_more_tool_calls_than_max_tool_calls_is_refused_whole() -> None:
    def calls(n: int) -> dict[str, Any]:
        wire = [
            {"index": i, "id": f"c{i}", "function": {"name": "read_file", "arguments": "{}"}}
            for i in range(n)
        ]
        return chunk({"tool_calls": wire}, "tool_calls")

    completion, _ = assemble(calls(MAX_TOOL_CALLS))
    assert len(completion.message.toolCalls) == MAX_TOOL_CALLS
    with pytest.raises(ProviderError) as info:
        assemble(calls(100_000))
    assert (info.value.kind, info.value.retryable) == ("protocol", False)
    assert f"more than {MAX_TOOL_CALLS} tool calls" in info.value.message


# ---------------------------------------------------------------- bounded usage

HUGE = 9 * 10**4299  # 4,300 digits: still parsed; two of them sum past what str() prints
MAX_REPORTED = 2**53 - 1  # the bound (session.MAX_REPORTED): an exact JSON number


def _wire(prompt: int, completion: int, cost: float | None = None) -> dict[str, Any]:
    wire: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cost is not None:
        wire["cost"] = cost
    return wire


@pytest.mark.parametrize(
    "wire",
    [
        _wire(HUGE, 5),
        _wire(12, 2**64 - 1),
        _wire(MAX_REPORTED + 1, 0),
        _wire(12, 5, cost=1e308),
        {**_wire(12, 5), "completion_tokens_details": {"reasoning_tokens": HUGE}},
        {**_wire(12, 5), "prompt_tokens_details": {"cached_tokens": "1e300"}},
    ],
    ids=["4300-digits", "u64-max", "just-past", "cost-1e308", "reasoning", "cached-string"],
)
def test_a_reported_number_past_the_bound_is_no_usage(wire: dict[str, Any]) -> None:
    assert usage_from_wire(wire) is None


def test_numbers_up_to_the_bound_are_kept() -> None:
    report = usage_from_wire(_wire(MAX_REPORTED, 0, cost=float(MAX_REPORTED)))
    assert report is not None and report.input_tokens == MAX_REPORTED
