"""Contexts for tests of the OpenAI-compatible provider's HTTP side.

    provider.complete(verbatim(b'{"role":"user","content":"hi"}'), [])

`verbatim` makes the neutral messages of chat-completions messages a test wrote, so a
test of the request body, the server's validation or its answers reads as the wire it
expects. The agent's own messages reach the wire through `build_context`
(tests/test_agent_context.py).
"""

from __future__ import annotations

import json
from typing import Any

from tiny_agent_nb.provider import messages
from tiny_agent_nb.session import ToolCall


def _message(wire: dict[str, Any]) -> messages.Message:
    role, content = wire["role"], wire.get("content")
    if role == "system":
        return messages.System(content)
    if role == "user":
        return messages.User(content)
    if role == "tool":
        return messages.ToolResult(wire["tool_call_id"], content)
    calls = tuple(
        ToolCall(
            id=call["id"],
            name=call["function"]["name"],
            arguments=json.loads(call["function"]["arguments"]),
        )
        for call in wire.get("tool_calls", ())
    )
    return messages.Assistant(content, calls)


def verbatim(*raw: bytes) -> list[messages.Message]:
    """The neutral messages the OpenAI-compatible provider sends as `raw` (each one
    chat-completions message, in JSON)."""
    return [_message(json.loads(one)) for one in raw]
