"""The chat-completions request body, built in pieces that are sent one after another:
a request copies no history (the context projection keeps it already encoded)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._types import ProviderConfig
from ._wire import Encoded, tool_definition

if TYPE_CHECKING:
    from ..tools import ToolSchema


def _dumps(value: Any) -> bytes:
    # ASCII-only, compact, no NaN: the most conservative JSON every server parses.
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def request_parts(
    config: ProviderConfig, messages: Sequence[Encoded], tools: Sequence[ToolSchema]
) -> list[Encoded]:
    """The POST body as pieces, sent one after the other without being joined.

    Each item of `messages` is one encoded JSON object, or several already joined by
    commas (the context projection keeps its history in a few such runs), so a request
    copies no history: only the pieces' ends are checked.
    """
    parts: list[Encoded] = [b'{"model":', _dumps(config.model), b',"messages":[']
    for i, message in enumerate(messages):
        if bytes(message[:1]) != b"{" or bytes(message[-1:]) != b"}":
            raise ValueError(f"messages[{i}] is not an encoded JSON object")
        if i:
            parts.append(b",")
        parts.append(message)
    parts.append(b"]")
    if tools:  # OpenAI rejects `tools: []`
        parts += [b',"tools":', _dumps([tool_definition(tool) for tool in tools])]
    if config.stream:
        parts.append(b',"stream":true,"stream_options":{"include_usage":true}')
    else:
        parts.append(b',"stream":false')
    for name, value in config.sampling().items():
        parts += [b",", _dumps(name), b":", _dumps(value)]
    parts.append(b"}")
    return parts
