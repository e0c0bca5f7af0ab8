"""The OpenAI chat-completions wire: a context's history kept encoded between requests,
and the request body that splices it in as it is.

The chat-completions message is the neutral message's `canonical` JSON itself (the
common chat shape its size is counted on), so the history cache stores the bytes the
context hands it and a step encodes only what was appended since the last one
(`messages.HistoryCache`).
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._messages import Context, Message, canonical, tool_as_dict
from ._types import ProviderConfig

if TYPE_CHECKING:  # only named: importing the tools is not a provider's business
    from ..tools import ToolSchema

# One encoded message, or several comma-joined: a read-only view of the cache's maps.
Encoded = bytes | memoryview

# A map holds this many bytes of messages (more only for one message larger than that).
SEALED_RUN = 1 << 20
# Private even across a fork (a `bash` or `python` tool's child): copy-on-write, like the
# heap. (Windows has no flags, and no fork.)
_PRIVATE = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}
# The key the cache is kept under by a history: one per wire format, so every
# OpenAI-compatible provider of a kernel shares it.
CACHE_KEY = "openai-chat-completions"


# perf: register row "projection-maps" (docs/benchmarks.md)
class _Runs:
    """The encoded messages, comma-joined, written in order into anonymous memory maps of
    SEALED_RUN bytes each: a message that does not fit in the current map starts the
    next one (its own size if larger), and a map once left is sealed. A request sends a
    read-only view of each map's filled part, so its cost does not grow with the history,
    and each byte is copied once, when its message is appended.

    Why maps and not `bytes`: the context lives as long as the kernel, while building it
    decodes and encodes the whole history through short-lived objects. Runs kept in the
    C allocator's heap lay long-lived blocks among those temporaries, and the heap keeps
    every hole they leave resident (a kernel held 1.9x what its context sends after
    building it, 0.9x of it free heap). A map is outside that heap: only its written
    pages are resident, and it is returned whole when the cache lets go of it.
    Views stay valid as later messages are written after them (a map is never resized)."""

    def __init__(self) -> None:
        self._sealed: list[memoryview] = []
        self._map: mmap.mmap | None = None
        self._used = 0  # bytes of `_map` written

    def append(self, message: bytes) -> None:
        run, used = self._map, self._used
        if run is None or used + 1 + len(message) > len(run):
            if run is not None:
                self._sealed.append(self._filled())
            run = self._map = mmap.mmap(-1, max(SEALED_RUN, len(message)), **_PRIVATE)
            used = 0
        elif used:
            run[used] = 44  # b","
            used += 1
        run[used : used + len(message)] = message
        self._used = used + len(message)

    def _filled(self) -> memoryview:
        assert self._map is not None
        return memoryview(self._map).toreadonly()[: self._used]

    def parts(self) -> list[Encoded]:
        """The maps' filled parts, which a request sends comma-joined."""
        return [*self._sealed, self._filled()] if self._map is not None else []

    def since(self, offset: int) -> bytes:
        """The messages from `offset` on, comma-joined (one copy, made at a checkpoint)."""
        kept: list[Encoded] = []
        for part in self.parts():
            if offset < len(part):
                kept.append(part[max(offset, 0) :])
            offset -= len(part) + 1
        return b",".join(kept)


class EncodedHistory:
    """A history's messages as chat-completions JSON, in `_Runs` (a `HistoryCache`)."""

    def __init__(self) -> None:
        self._runs = _Runs()

    def append(self, message: Message, canonical: bytes) -> None:
        self._runs.append(canonical)

    def drop(self, count: int, size: int) -> None:
        # Where the kept messages start is what the dropped ones' canonical JSON took,
        # commas included: these runs hold exactly that JSON (no offsets of our own).
        runs = _Runs()
        kept = self._runs.since(size)
        if kept:  # one copy of what is kept (the tail a checkpoint keeps), none of the rest
            runs.append(kept)
        self._runs = runs

    def parts(self) -> list[Encoded]:
        return self._runs.parts()


def encoded(context: Context) -> list[Encoded]:
    """The messages of `context` as a request carries them: each one encoded JSON object,
    or several comma-joined (the history's runs, from its cache: not copied)."""
    # Asked first: a history not built yet is then built straight into the cache.
    history = context.history_cache(CACHE_KEY, EncodedHistory)
    parts: list[Encoded] = [canonical(m) for m in context.head]
    if history is not None:
        parts += history.parts()
    parts += [canonical(m) for m in context.tail]
    return parts


def _dumps(value: Any) -> bytes:
    # ASCII-only, compact, no NaN: the most conservative JSON every server parses.
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def request_parts(
    config: ProviderConfig, messages: Sequence[Encoded], tools: Sequence[ToolSchema]
) -> list[Encoded]:
    """The POST body as pieces, sent one after the other without being joined, so a
    request copies no history: only the ends of each message (or run) are checked."""
    parts: list[Encoded] = [b'{"model":', _dumps(config.model), b',"messages":[']
    for i, message in enumerate(messages):
        if bytes(message[:1]) != b"{" or bytes(message[-1:]) != b"}":
            raise ValueError(f"messages[{i}] is not an encoded JSON object")
        if i:
            parts.append(b",")
        parts.append(message)
    parts.append(b"]")
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
