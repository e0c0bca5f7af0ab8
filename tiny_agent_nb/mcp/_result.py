"""A CallToolResult turned into what the model reads, and the usage it reports.

Text is kept as it is; binary content (images, audio, blobs) is described, never
dumped: base64 would fill the context with nothing the model can read.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from typing import Any

from ..session import MAX_REPORTED
from ..tools import ToolUsage
from ..words import byte_size

__all__ = ["result_text", "result_usage"]


def result_text(result: Any) -> str:
    """The content of a `mcp_types.CallToolResult` as one text (blocks joined by lines)."""
    parts: list[str] = []
    texts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {_size(block.data)}, not shown]")
        elif kind == "resource":
            parts.append(_resource(block.resource))
        elif kind == "resource_link":
            name = f" ({block.name})" if getattr(block, "name", None) else ""
            parts.append(f"[resource link {block.uri}{name}]")
        else:
            parts.append(f"[{kind or 'unknown'} content, not shown]")
    structured = result.structured_content
    if structured is not None and not _carried(structured, texts):
        parts.append(json.dumps(structured, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(parts)


def _resource(resource: Any) -> str:
    text = getattr(resource, "text", None)
    if text is not None:
        return f"[resource {resource.uri}]\n{text}"
    mime = resource.mime_type or "application/octet-stream"
    return f"[resource {resource.uri}, {mime}, {_size(resource.blob)}, not shown]"


def _size(data: str) -> str:
    try:
        size = len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        size = len(data) * 3 // 4
    return byte_size(size)


def _carried(structured: Any, texts: list[str]) -> bool:
    """Whether a text block already says what the structured content says: its JSON, or
    the value of the SDK's `{"result": value}` wrapping of a plain return value."""
    said = [structured]
    if isinstance(structured, Mapping) and set(structured) == {"result"}:
        said.append(structured["result"])
    for text in texts:
        if text in said:
            return True
        try:
            if json.loads(text) in said:
                return True
        except ValueError:
            continue
    return False


# Field names read for each count: our file's camelCase, snake_case, OpenAI's names.
_COUNTS = {
    "input_tokens": ("inputTokens", "input_tokens", "prompt_tokens"),
    "output_tokens": ("outputTokens", "output_tokens", "completion_tokens"),
    "reasoning_tokens": ("reasoningTokens", "reasoning_tokens"),
    "cached_input_tokens": ("cachedInputTokens", "cached_input_tokens"),
}


def result_usage(result: Any) -> ToolUsage | None:
    """The usage in the result's `_meta.usage`; None when there is none, it is malformed or
    past MAX_REPORTED (a wrong count is worse than none: it would be summed into the
    session's totals, and a server's 1e308 would make them infinite)."""
    meta = result.meta
    usage = meta.get("usage") if isinstance(meta, Mapping) else None
    if not isinstance(usage, Mapping):
        return None
    counts: dict[str, int] = {}
    for field, names in _COUNTS.items():
        found = [usage[name] for name in names if name in usage]
        value = found[0] if found else 0
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPORTED:
            return None
        counts[field] = value
    cost = usage.get("cost")
    if cost is not None and (
        isinstance(cost, bool)
        or not isinstance(cost, int | float)
        or not math.isfinite(cost)
        or not 0 <= cost <= MAX_REPORTED
    ):
        return None
    return ToolUsage(**counts, cost=None if cost is None else float(cost))
