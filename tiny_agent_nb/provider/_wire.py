"""The OpenAI chat-completions wire format: messages and tools as the server reads them.

The one place that knows the shape of a `messages[]` item and of a `tools[]` entry for
this provider: it encodes the agent's provider-neutral messages (`_messages.py`), the
history once per message into its cache (`_encoded.py`), and the request body
(`_request.py`) splices the bytes in as they are.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._messages import Message, canonical, tool_as_dict

if TYPE_CHECKING:  # only named: importing the tools is not a provider's business
    from ..tools import ToolSchema

# One encoded message, or several comma-joined: the encoding cache keeps a history in
# memory maps and hands out read-only views of them (`_encoded._Runs`).
Encoded = bytes | memoryview


def encode(value: dict[str, Any]) -> bytes:
    """A JSON object as the bytes a request carries (UTF-8, compact)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def encode_message(message: Message) -> bytes:
    """One chat-completions message. Its shape is the common chat shape the neutral
    messages' sizes are counted on, so the bytes are their `canonical` JSON itself: the
    encoding cache stores that as it is given, without encoding again."""
    return canonical(message)


def tool_definition(schema: ToolSchema) -> dict[str, Any]:
    """A tool as a `tools[]` entry of the request (the common chat shape)."""
    return tool_as_dict(schema)
