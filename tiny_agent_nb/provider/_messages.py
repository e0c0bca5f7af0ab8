"""What the agent sends a model, in no provider's wire format (docs/spec.md §3).

The agent's context builder (`agent/_context.py`) turns the session into these messages;
each provider encodes them into its own wire format. Five kinds, as spec §3 sends them:
the system prompt, a user turn, an assistant turn (with its tool calls), a tool result,
and an assistant note of ours (the package's own words in the assistant's voice: a
checkpoint's summary, or the note that a prompt got no answer). A provider that has no
such thing as a note sends it as an assistant turn.

A context (`Context`) is the messages of one request, in order: the agent builds them
afresh for each request (agent/_context.py, a `Built` list), and encodes them once: the
bytes it measures are the bytes the provider sends.

Sizes (`size`) are estimates, counted on the messages' compact UTF-8 JSON in the common
chat shape (`encode`: role, content, tool calls), the chat-completions body's own; a
server's token count calibrates them (agent/_window.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from ..session import ToolCall

if TYPE_CHECKING:  # only named: importing the tools is not a provider's business
    from ..tools import ToolSchema


# Not frozen: a frozen dataclass sets each field through object.__setattr__, 5x the
# cost of a plain one, and a request builds one message per entry of the history.
@dataclass(slots=True)
class System:
    content: str


@dataclass(slots=True)
class User:
    content: str


@dataclass(slots=True)
class Assistant:
    """A turn of the model's: its text (else its refusal, else "") and its tool calls."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(slots=True)
class Note:
    """The package's own words in the assistant's voice (never the model's answer)."""

    content: str


@dataclass(slots=True)
class ToolResult:
    tool_call_id: str
    content: str


Message = System | User | Assistant | Note | ToolResult


Context = Sequence[Message]  # what one request sends, in order


class Built(list[Message]):
    """A context as `build_context` returns it: its encoding (`encode`) is made once, on
    first use, so the size the window check reads is the request body's own bytes, not a
    second encoding. Built afresh for each request: nothing outlives it."""

    @cached_property
    def encoded(self) -> bytes:
        return _json(self)


def encode(messages: Sequence[Message]) -> bytes:
    """`messages` as a compact UTF-8 JSON array in the common chat shape (the
    chat-completions body's "messages"): the size of a context, estimated, is its length."""
    return messages.encoded if isinstance(messages, Built) else _json(messages)


def _json(messages: Sequence[Message]) -> bytes:
    return to_json([_SHAPES[type(message)](message) for message in messages])


def size(message: Message) -> int:
    """Bytes of `message` as a request carries it, estimated (see the module's note)."""
    return len(to_json(as_dict(message)))


def as_dict(message: Message) -> dict[str, Any]:
    """`message` in the common chat shape ({"role", "content"}, tool calls, call id)."""
    return _SHAPES[type(message)](message)


def _assistant(message: Assistant) -> dict[str, Any]:
    shaped: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        shaped["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    # Malformed arguments are not echoed back: some servers reject them.
                    "arguments": to_json(call.arguments).decode(),
                },
            }
            for call in message.tool_calls
        ]
    return shaped


# One lookup per message, by its exact type (the five are final dataclasses).
_SHAPES: dict[type, Callable[[Any], dict[str, Any]]] = {
    System: lambda message: {"role": "system", "content": message.content},
    User: lambda message: {"role": "user", "content": message.content},
    Note: lambda message: {"role": "assistant", "content": message.content},
    ToolResult: lambda message: {
        "role": "tool",
        "tool_call_id": message.tool_call_id,
        "content": message.content,
    },
    Assistant: _assistant,
}


def tool_as_dict(schema: ToolSchema) -> dict[str, Any]:
    """A tool's definition in the common chat shape."""
    return {
        "type": "function",
        "function": {
            "name": schema.name,
            "description": schema.description,
            "parameters": dict(schema.parameters),
        },
    }


def tools_size(schemas: Sequence[ToolSchema]) -> int:
    """Bytes of the tool definitions a request carries, estimated as `size` is."""
    return len(to_json({"tools": [tool_as_dict(schema) for schema in schemas]}))


# The lines that open and close a prompt's user cells (docs/spec.md §6): what the
# notebook writes around them, and where the offline demo finds the prompt's own text.
USER_CELLS_START = "[Cells the user ran since the previous agent cell, oldest first]"
USER_CELLS_END = "[End of the user's cells]"


# How a kernel notice begins (docs/spec.md §9). A run's notice reaches the model in the
# same user turn as the prompt after it, a paragraph before it (`with_notice`): two user
# turns in a row are refused by the strictest chat templates (Gemma's, Mistral's).
KERNEL_NOTICE_START = "[Kernel restarted]"


def with_notice(notice: str, content: str) -> str:
    """One user turn: the kernel notice, a blank line, then what the user entry sends."""
    return f"{notice}\n\n{content}"


def prompt_of(content: str) -> str:
    """The prompt's own text in a user turn (without its user cells or a kernel notice
    before it): the offline demo's input; "" for a kernel notice alone (a resume's)."""
    if content.startswith(KERNEL_NOTICE_START):
        content = content.partition("\n\n")[2]
    if content.startswith(USER_CELLS_START):
        _, end, prompt = content.partition(f"\n{USER_CELLS_END}\n\n")
        if end:
            return prompt
    return content
