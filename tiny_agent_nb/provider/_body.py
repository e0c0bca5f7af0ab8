"""A response body decoded in bounded pieces.

httpx decodes `Content-Encoding` itself, one received chunk at a time and without a
limit on what one chunk may expand to: a 7 KB `gzip, gzip` body became 8 GB in a single
call, before `max_response_bytes` could see a byte of it. Here the raw bytes are
inflated at most `PIECE` bytes at a time, so the byte limit counts the decoded answer
as it grows. Only gzip and deflate are asked for (`ACCEPT_ENCODING`); a server that
answers in any other encoding gets a clear error instead of an unbounded decoder.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

from .._exceptions import TinyAgentError

ACCEPT_ENCODING = "gzip, deflate"
PIECE = 64 * 1024  # decoded bytes produced per step, whatever one raw chunk holds
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class UnsupportedEncoding(TinyAgentError, ValueError):
    """The body's Content-Encoding is not one this client decodes."""


def decoded(raw: Iterable[bytes], content_encoding: str) -> Iterator[bytes]:
    """`raw` with the encodings of `content_encoding` (applied in order) undone, in
    pieces of at most PIECE bytes. Raises UnsupportedEncoding, or zlib.error for a body
    that is not what it says."""
    return _all_decoded(raw, BodyDecoder(content_encoding))


def _all_decoded(raw: Iterable[bytes], decoder: BodyDecoder) -> Iterator[bytes]:
    for chunk in raw:
        yield from decoder.decode(chunk)
    yield from decoder.flush()


class BodyDecoder:
    """The same, fed one raw chunk at a time (a body read asynchronously): `decode` each
    chunk, then `flush` once at the end; each yields pieces of at most PIECE bytes."""

    def __init__(self, content_encoding: str) -> None:
        codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
        self._stages: list[zlib._Decompress] = []
        for coding in reversed(codings):  # the last one applied is undone first
            if coding == "identity":
                continue
            if coding not in _WBITS:
                raise UnsupportedEncoding(coding)
            self._stages.append(zlib.decompressobj(_WBITS[coding]))

    def decode(self, chunk: bytes) -> Iterator[bytes]:
        return self._feed(0, chunk)

    def flush(self) -> Iterator[bytes]:
        for index, inflater in enumerate(self._stages):
            # Everything was fed through `unconsumed_tail` already; what is left is the
            # few bytes zlib holds back, not a body's worth.
            rest = inflater.flush()
            if rest:
                yield from self._feed(index + 1, rest)

    def _feed(self, index: int, data: bytes) -> Iterator[bytes]:
        if index == len(self._stages):
            if data:
                yield data
            return
        inflater = self._stages[index]
        while data:
            piece = inflater.decompress(data, PIECE)
            data = inflater.unconsumed_tail
            if piece:
                yield from self._feed(index + 1, piece)
