"""The OpenAI chat-completions wire: the request body of a context, encoded per request.

A chat-completions message is the neutral message in the common chat shape
(`messages.as_dict`), so the body's "messages" is `messages.encode` of the context: the
bytes the agent measured (`messages.Built`), set between the body's other members.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from ._messages import Message, encode, tool_as_dict
from ._types import ProviderConfig

if TYPE_CHECKING:  # only named: importing the tools is not a provider's business
    from ..tools import ToolSchema


def request_body(
    config: ProviderConfig, messages: Sequence[Message], tools: Sequence[ToolSchema]
) -> bytes:
    """The POST body: compact UTF-8 JSON."""
    rest: dict[str, Any] = {}
    if tools:  # OpenAI rejects `tools: []`
        rest["tools"] = [tool_as_dict(tool) for tool in tools]
    rest["stream"] = config.stream
    if config.stream:
        rest["stream_options"] = {"include_usage": True}
    rest.update(config.sampling())
    # {"model":…,"messages":[…],…rest}: what to_json of one dict in that order gives.
    return b"".join(
        (
            b'{"model":',
            to_json(config.model),
            b',"messages":',
            encode(messages),
            b",",
            to_json(rest)[1:],
        )
    )
