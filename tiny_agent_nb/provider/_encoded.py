"""The OpenAI-compatible provider's encoding cache: a context's history as the request
bytes, encoded once per message, kept between requests.

A request splices these bytes in as they are (`_request.py`), so the cost of a step does
not grow with the length of the history: only the messages appended since the last one
are encoded, when the history appends them (`messages.HistoryCache`).
"""

from __future__ import annotations

import mmap

from ._messages import Context, Message
from ._wire import Encoded, encode_message

# A map holds this many bytes of messages (more only for one message larger than that).
SEALED_RUN = 1 << 20
# Private even across a fork (a `bash` or `python` tool's child): copy-on-write, like the
# heap. (Windows has no flags, and no fork.)
_PRIVATE = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}
# The key this provider's cache is kept under by a history: one per wire format, so
# every OpenAI-compatible provider of a kernel shares it.
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
        self._length = 0  # of the messages joined with commas

    def append(self, message: bytes) -> int:
        """Add `message`; where it starts in the messages joined with commas."""
        offset = self._length + 1 if self._length else 0
        self._length = offset + len(message)
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
        return offset

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
        # The chat-completions message is the canonical JSON itself (`encode_message`).
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
    parts: list[Encoded] = [encode_message(m) for m in context.head]
    if history is not None:
        parts += history.parts()
    parts += [encode_message(m) for m in context.tail]
    return parts
