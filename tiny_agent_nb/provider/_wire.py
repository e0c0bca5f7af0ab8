"""The OpenAI chat-completions wire format: entries and tools as the server reads them.

The one place that knows the shape of a `messages[]` item and of a `tools[]` entry: the
agent's context projection encodes each committed entry here once, and the request body
(`_request.py`) splices the bytes in as they are.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..session import AssistantEntry, EntryFact, KernelNotice, ToolResultEntry, UserEntry

if TYPE_CHECKING:  # only named: importing the tools is not a provider's business
    from ..tools import ToolSchema

# One encoded message, or several comma-joined: the context projection keeps its history
# in memory maps and hands out read-only views of them (agent/_context.py `_Runs`).
Encoded = bytes | memoryview


def encode(message: dict[str, Any]) -> bytes:
    """One message as the bytes a request carries (UTF-8, compact)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def system_message(content: str) -> bytes:
    return encode({"role": "system", "content": content})


def user_message(content: str) -> bytes:
    return encode({"role": "user", "content": content})


def tool_message(tool_call_id: str, content: str) -> bytes:
    return encode({"role": "tool", "tool_call_id": tool_call_id, "content": content})


# The lines that open and close a prompt's user cells (docs/spec.md §15): what the
# notebook writes around them, and where the offline demo finds the prompt's own text.
USER_CELLS_START = "[Cells the user ran since the previous agent cell, oldest first]"
USER_CELLS_END = "[End of the user's cells]"


# How a kernel notice begins (docs/spec.md §18). A run's notice reaches the model in the
# same user turn as the prompt after it, a paragraph before it (`with_notice`): two user
# turns in a row are refused by the strictest chat templates (Gemma's, Mistral's).
KERNEL_NOTICE_START = "[Kernel restarted]"


def with_notice(notice: str, content: str) -> str:
    """One user turn: the kernel notice, a blank line, then what the user entry sends."""
    return f"{notice}\n\n{content}"


def user_content(body: UserEntry) -> str:
    """What a user entry sends: its user cells, a blank line, then the prompt."""
    cells = body.userCells
    return f"{cells}\n\n{body.message.content}" if cells else body.message.content


def prompt_of(content: str) -> str:
    """The prompt's own text in what `user_content` (and `with_notice`) made: the offline
    demo's input; "" for a kernel notice alone (a resume's)."""
    if content.startswith(KERNEL_NOTICE_START):
        content = content.partition("\n\n")[2]
    if content.startswith(USER_CELLS_START):
        _, end, prompt = content.partition(f"\n{USER_CELLS_END}\n\n")
        if end:
            return prompt
    return content


def entry_message(entry: EntryFact) -> dict[str, Any] | None:
    """The chat-completions message of one entry (None for compactions)."""
    body = entry.entry
    if isinstance(body, UserEntry):
        return {"role": "user", "content": user_content(body)}
    if isinstance(body, KernelNotice):
        return {"role": "user", "content": body.message.content}
    if isinstance(body, AssistantEntry):
        msg = body.message
        # Servers differ on `content: null` beside tool calls; "" is accepted everywhere.
        wire: dict[str, Any] = {"role": "assistant", "content": msg.content or msg.refusal or ""}
        if msg.toolCalls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        # Malformed arguments are not echoed back: some servers reject them.
                        "arguments": json.dumps(call.arguments, ensure_ascii=False),
                    },
                }
                for call in msg.toolCalls
            ]
        return wire
    if isinstance(body, ToolResultEntry):
        return {
            "role": "tool",
            "tool_call_id": body.message.toolCallId,
            "content": body.message.content,
        }
    return None


def tool_definition(schema: ToolSchema) -> dict[str, Any]:
    """A tool as a `tools[]` entry of the request."""
    return {
        "type": "function",
        "function": {
            "name": schema.name,
            "description": schema.description,
            "parameters": dict(schema.parameters),
        },
    }
