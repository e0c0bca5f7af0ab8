"""The OpenAI chat-completions wire: the request body, the context's messages spliced in.

The chat-completions message is the neutral message's `canonical` JSON itself (the
common chat shape its size is counted on), so the history goes out as the context keeps
it, and a request encodes only its head and tail.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._messages import Context, canonical, tool_as_dict
from ._types import ProviderConfig

if TYPE_CHECKING:  # only named: importing the tools is not a provider's business
    from ..tools import ToolSchema


def encoded(context: Context) -> list[bytes]:
    """The messages of `context` as a request carries them, each one encoded JSON object:
    the history's as the context keeps them (not copied), the rest encoded now."""
    parts = [canonical(m) for m in context.head]
    parts += [m if isinstance(m, bytes) else canonical(m) for m in context.history]
    parts += [canonical(m) for m in context.tail]
    return parts


def _dumps(value: Any) -> bytes:
    # ASCII-only, compact, no NaN: the most conservative JSON every server parses.
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def request_parts(
    config: ProviderConfig, messages: Sequence[bytes], tools: Sequence[ToolSchema]
) -> list[bytes]:
    """The POST body as pieces, sent one after the other (`_client`): the messages, each
    one encoded JSON object, in one piece, joined once (a piece each cost httpx a write
    per message)."""
    parts = [b'{"model":', _dumps(config.model), b',"messages":[', b",".join(messages), b"]"]
    if tools:  # OpenAI rejects `tools: []`
        parts += [b',"tools":', _dumps([tool_as_dict(tool) for tool in tools])]
    if config.stream:
        parts.append(b',"stream":true,"stream_options":{"include_usage":true}')
    else:
        parts.append(b',"stream":false')
    for name, value in config.sampling().items():
        parts += [b",", _dumps(name), b":", _dumps(value)]
    parts.append(b"}")
    return parts
