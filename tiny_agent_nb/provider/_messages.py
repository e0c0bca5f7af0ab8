"""What the agent sends a model, in no provider's wire format (docs/spec.md §3).

The agent's context builder (`agent/_context.py`) turns the session into these messages;
each provider encodes them into its own wire format. Five kinds, as spec §3 sends them:
the system prompt, a user turn, an assistant turn (with its tool calls), a tool result,
and an assistant note of ours (the package's own words in the assistant's voice: a
checkpoint's summary, or the note that a prompt got no answer). A provider that has no
such thing as a note sends it as an assistant turn.

A context is three parts (`Context`): a short head (system prompt, a checkpoint's
summary), the history (`History`: the long, append-only part) and a short tail (answers
for tool calls that never started, a kernel notice waiting for its prompt). The history
feeds each message, as it is appended, to the caches kept of it (`HistoryCache`): a
provider that iterates the context reads a `MessageList`; the OpenAI-compatible one
declares its own (`HISTORY_CACHE`: the history encoded once, `_wire`), which the agent
loop keeps from a run's start so the history is built straight into it.

Sizes (`size`) are estimates, counted on each message's canonical JSON (`canonical`: its
role, content and tool calls in the common chat shape); a server's own token count
calibrates them (agent/_window.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

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


class HistoryCache(Protocol):
    """A provider's own copy of a history, kept in step with it by the history: fed each
    message as it is appended (with its `canonical` JSON, made already for its size), and
    told when a checkpoint drops the oldest ones."""

    def append(self, message: Message, canonical: bytes) -> None: ...

    def drop(self, count: int, size: int) -> None:
        """Forget the first `count` messages held; `size`: their canonical JSON's bytes,
        each with a comma (where the rest starts in them, comma-joined)."""
        ...


C = TypeVar("C", bound=HistoryCache)
MESSAGES = "messages"  # the key of the `MessageList` that iterating a context keeps


class History(Protocol):
    """The long part of a context (what a request sends between head and tail)."""

    def cache(self, key: Hashable, make: Callable[[], C]) -> C:
        """The cache kept under `key`, made and filled with the messages when first
        asked for, then fed as messages are appended, for as long as the history lives."""
        ...


def history_cache(provider: object) -> tuple[Hashable, Callable[[], HistoryCache]]:
    """The cache `provider` keeps of a history, as (key, how to make one): what its
    `HISTORY_CACHE` declares, else the messages themselves (what iterating a context
    reads). Whoever holds a history for a provider asks it to keep that cache before its
    first request, so a history not built yet is built straight into it."""
    declared: tuple[Hashable, Callable[[], HistoryCache]] | None
    declared = getattr(provider, "HISTORY_CACHE", None)
    return declared if declared is not None else (MESSAGES, MessageList)


class MessageList:
    """The simplest `HistoryCache`: the messages themselves, in a list (what iterating a
    context keeps, under MESSAGES)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def append(self, message: Message, canonical: bytes) -> None:
        self.messages.append(message)

    def drop(self, count: int, size: int) -> None:
        del self.messages[:count]


class Context:
    """What one request sends: `head`, then the `history`, then `tail`.

    The agent's context reads its head and tail when asked (they depend on a history
    that is built when first read): a provider that keeps a `HistoryCache` asks for it
    first (`history_cache`), so a history not built yet is built straight into it."""

    def __init__(
        self,
        head: Sequence[Message] = (),
        history: History | None = None,
        tail: Sequence[Message] = (),
    ) -> None:
        self._head, self._tail = tuple(head), tuple(tail)
        self.history = history

    @classmethod
    def of(cls, messages: Sequence[Message]) -> Context:
        """A context of these messages alone (a summarization request's, a test's)."""
        return cls(messages)

    @property
    def head(self) -> Sequence[Message]:
        return self._head

    @property
    def tail(self) -> Sequence[Message]:
        return self._tail

    def __iter__(self) -> Iterator[Message]:
        history = self.history
        cached = None if history is None else history.cache(MESSAGES, MessageList)
        yield from self.head
        if cached is not None:
            yield from cached.messages
        yield from self.tail

    def history_cache(self, key: Hashable, make: Callable[[], C]) -> C | None:
        """The history's cache under `key` (None when the context has no history)."""
        history = self.history
        return None if history is None else history.cache(key, make)


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
