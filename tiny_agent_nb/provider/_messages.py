"""What the agent sends a model, in no provider's wire format (docs/spec.md §3).

The agent's context builder (`agent/_context.py`) turns the session into these messages;
each provider encodes them into its own wire format. Five kinds, as spec §3 sends them:
the system prompt, a user turn, an assistant turn (with its tool calls), a tool result,
and an assistant note of ours (the package's own words in the assistant's voice: a
checkpoint's summary, or the note that a prompt got no answer). A provider that has no
such thing as a note sends it as an assistant turn.

A context is three parts (`Context`): a short head (system prompt, a checkpoint's
summary), the history (the long part, each message kept as its canonical JSON) and a
short tail (answers for tool calls that never started, a kernel notice waiting for its
prompt).

Sizes (`size`) are estimates, counted on each message's canonical JSON (`canonical`: its
role, content and tool calls in the common chat shape); a server's own token count
calibrates them (agent/_window.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..session import ToolCall

if TYPE_CHECKING:  # only named: importing the tools is not a provider's business
    from ..tools import ToolSchema


@dataclass(frozen=True, slots=True)
class System:
    content: str


@dataclass(frozen=True, slots=True)
class User:
    content: str


@dataclass(frozen=True, slots=True)
class Assistant:
    """A turn of the model's: its text (else its refusal, else "") and its tool calls."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Note:
    """The package's own words in the assistant's voice (never the model's answer)."""

    content: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    tool_call_id: str
    content: str


Message = System | User | Assistant | Note | ToolResult


def canonical(message: Message) -> bytes:
    """`message` as compact UTF-8 JSON in the common chat shape: what `size` counts."""
    return json.dumps(as_dict(message), ensure_ascii=False, separators=(",", ":")).encode()


def size(message: Message) -> int:
    """Bytes of `message` as a request carries it, estimated (see the module's note)."""
    return len(canonical(message))


def as_dict(message: Message) -> dict[str, Any]:
    """`message` in the common chat shape ({"role", "content"}, tool calls, call id)."""
    if isinstance(message, System):
        return {"role": "system", "content": message.content}
    if isinstance(message, User):
        return {"role": "user", "content": message.content}
    if isinstance(message, Note):
        return {"role": "assistant", "content": message.content}
    if isinstance(message, ToolResult):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    shaped: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        shaped["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    # Malformed arguments are not echoed back: some servers reject them.
                    "arguments": json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            for call in message.tool_calls
        ]
    return shaped


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
    shaped = {"tools": [tool_as_dict(schema) for schema in schemas]}
    return len(json.dumps(shaped, ensure_ascii=False, separators=(",", ":")).encode())


class Context:
    """What one request sends: `head`, then the `history`, then `tail`.

    The history (the long part) holds each message as its `canonical` JSON, which is the
    chat-completions wire's message as it is (a provider of that wire joins the bytes);
    only our notes are kept as messages, their JSON being an assistant turn's. Iterating
    a context gives every message as a `Message` (a provider of another wire shape reads
    those). The agent's context reads its parts when asked (`agent/_context.py`)."""

    def __init__(
        self,
        head: Sequence[Message] = (),
        history: Sequence[bytes | Message] = (),
        tail: Sequence[Message] = (),
    ) -> None:
        self._head, self._history, self._tail = tuple(head), history, tuple(tail)

    @classmethod
    def of(cls, messages: Sequence[Message]) -> Context:
        """A context of these messages alone (a summarization request's, a test's)."""
        return cls(messages)

    @property
    def head(self) -> Sequence[Message]:
        return self._head

    @property
    def history(self) -> Sequence[bytes | Message]:
        return self._history

    @property
    def tail(self) -> Sequence[Message]:
        return self._tail

    def __iter__(self) -> Iterator[Message]:
        yield from self.head
        for message in self.history:
            yield decode(message) if isinstance(message, bytes) else message
        yield from self.tail


def decode(encoded: bytes) -> Message:
    """The message whose `canonical` JSON is `encoded` (an assistant turn's, never a note)."""
    shaped = json.loads(encoded)
    role, content = shaped["role"], shaped["content"]
    if role == "user":
        return User(content)
    if role == "tool":
        return ToolResult(shaped["tool_call_id"], content)
    if role == "system":
        return System(content)
    calls = tuple(
        ToolCall(
            id=call["id"],
            name=call["function"]["name"],
            arguments=json.loads(call["function"]["arguments"]),
        )
        for call in shaped.get("tool_calls", ())
    )
    return Assistant(content, calls)


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
