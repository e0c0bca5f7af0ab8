"""The OpenAI chat-completions wire: the request body of a context, encoded per request.

A chat-completions message is the neutral message in the common chat shape
(`messages.as_dict`), so the body's "messages" is `messages.encode` of the context.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from ._messages import Message, as_dict, tool_as_dict
from ._types import ProviderConfig

if TYPE_CHECKING:  # only named: importing the tools is not a provider's business
    from ..tools import ToolSchema


def request_body(
    config: ProviderConfig, messages: Sequence[Message], tools: Sequence[ToolSchema]
) -> bytes:
    """The POST body: compact UTF-8 JSON."""
    body: dict[str, Any] = {"model": config.model, "messages": [as_dict(m) for m in messages]}
    if tools:  # OpenAI rejects `tools: []`
        body["tools"] = [tool_as_dict(tool) for tool in tools]
    body["stream"] = config.stream
    if config.stream:
        body["stream_options"] = {"include_usage": True}
    body.update(config.sampling())
    return to_json(body)
