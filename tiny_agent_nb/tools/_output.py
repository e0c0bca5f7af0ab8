"""Keeping a tool's output within what the model is sent, and safe to commit.

`truncate` cuts a finished text; `CappedOutput` does the same to a stream (a bash
command may print gigabytes) while holding at most `limit` characters, and yields
exactly what `truncate` would have made of the whole stream.

`clean_text` is what the agent loop applies to every result before it is committed:
tool output is untrusted text, it may hold what cannot be encoded, or the API key.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable

from ..redaction import redact
from ..words import clean_unicode


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of a long output, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = _split(limit)
    # text[len - tail:] rather than text[-tail:]: with tail == 0 the latter is everything.
    return _elided(text[:head], len(text) - head - tail, text[len(text) - tail :])


def _split(limit: int) -> tuple[int, int]:
    head = max(limit, 0) * 2 // 3
    return head, max(limit, 0) - head


def _elided(head: str, cut: int, tail: str) -> str:
    return f"{head}\n[... {cut} characters truncated ...]\n{tail}"


class CappedOutput:
    """Bytes in, the `truncate`d text out, with bounded memory.

    Bytes are decoded incrementally (UTF-8, undecodable bytes replaced) so that a
    multi-byte character split across two reads is still one character.
    """

    def __init__(self, limit: int) -> None:
        self._limit = max(limit, 0)
        self._head_size, self._tail_size = _split(limit)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head = ""
        self._tail = ""
        self._total = 0  # characters seen

    @property
    def total(self) -> int:
        return self._total

    def feed(self, data: bytes, *, final: bool = False) -> None:
        self._add(self._decoder.decode(data, final))

    def text(self) -> str:
        self.feed(b"", final=True)
        if self._total <= self._limit:
            # Nothing was dropped: the head and tail together are the whole text.
            return self._head + self._tail
        return _elided(self._head, self._total - self._limit, self._tail)

    def _add(self, text: str) -> None:
        if not text:
            return
        self._total += len(text)
        room = self._head_size - len(self._head)
        if room > 0:
            self._head += text[:room]
            text = text[room:]
        # The tail must cover everything after the head while the total is still within
        # the limit, so it holds up to `limit - head` characters: the tail size.
        if self._tail_size:
            self._tail = (self._tail + text)[-self._tail_size :]


# ---------------------------------------------------------------- before a result is committed


def clean_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Text (a tool's output, a prompt, the user's cells) as it may be committed, sent to
    the model and shown: valid Unicode (`clean_unicode`: a lone surrogate, e.g. from a file
    name that is not UTF-8, becomes U+FFFD, which cannot be encoded and would make the
    commit fail) with every secret redacted (`redact`)."""
    return redact(clean_unicode(text), secrets)
