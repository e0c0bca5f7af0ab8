"""A CallToolResult as the model reads it, and the usage a tool reports in `_meta`, for
shapes the test server does not produce (results built with the SDK's own types)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from mcp_types import CallToolResult

from tiny_agent_nb.mcp._result import result_text, result_usage
from tiny_agent_nb.tools import ToolUsage


def result(content: list[dict[str, Any]], **extra: Any) -> CallToolResult:
    return CallToolResult.model_validate({"content": content, **extra})


def test_audio_is_described_with_its_size() -> None:
    data = base64.b64encode(bytes(3 * 1024 * 1024)).decode()
    text = result_text(result([{"type": "audio", "data": data, "mimeType": "audio/wav"}]))
    assert text == "[audio audio/wav, 3 MB, not shown]"


def test_blocks_are_joined_in_order_and_structured_content_follows_unless_carried() -> None:
    both = result(
        [{"type": "text", "text": "It is 21.5 C."}],
        structuredContent={"temperature": 21.5},
    )
    assert result_text(both) == 'It is 21.5 C.\n{"temperature":21.5}'
    carried = result(
        [{"type": "text", "text": '{"temperature": 21.5}'}], structuredContent={"temperature": 21.5}
    )
    assert result_text(carried) == '{"temperature": 21.5}'
    wrapped = result([{"type": "text", "text": "42"}], structuredContent={"result": 42})
    assert result_text(wrapped) == "42"


def test_a_blob_resource_without_a_mime_type_is_described_as_octets() -> None:
    blob = base64.b64encode(b"x" * 10).decode()
    text = result_text(result([{"type": "resource", "resource": {"uri": "mem://a", "blob": blob}}]))
    assert text == "[resource mem://a, application/octet-stream, 10 B, not shown]"


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {"inputTokens": 10, "outputTokens": 2, "reasoningTokens": 1, "cachedInputTokens": 4},
            ToolUsage(10, 2, 1, 4, None),
        ),
        ({"input_tokens": 10, "output_tokens": 2, "cost": 0.5}, ToolUsage(10, 2, cost=0.5)),
        ({"prompt_tokens": 7, "completion_tokens": 3}, ToolUsage(7, 3)),
        ({"outputTokens": 5}, ToolUsage(output_tokens=5)),
        ({"inputTokens": 1, "cost": 2}, ToolUsage(input_tokens=1, cost=2.0)),
    ],
)
def test_usage_is_read_from_result_meta_in_each_spelling(
    usage: dict[str, Any], expected: ToolUsage
) -> None:
    assert result_usage(result([], _meta={"usage": usage})) == expected


@pytest.mark.parametrize(
    "meta",
    [
        None,
        {},
        {"usage": None},
        {"usage": "lots"},
        {"usage": {"inputTokens": -1}},
        {"usage": {"inputTokens": "10"}},
        {"usage": {"inputTokens": 1.5}},
        {"usage": {"inputTokens": True}},
        {"usage": {"inputTokens": 1, "cost": "free"}},
        {"usage": {"inputTokens": 1, "cost": float("nan")}},
        {"usage": {"inputTokens": 1, "cost": -0.1}},
    ],
)
def test_missing_or_malformed_usage_is_no_usage(meta: dict[str, Any] | None) -> None:
    extra = {} if meta is None else {"_meta": meta}
    assert result_usage(result([], **extra)) is None
