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

ACCEPT_ENCODING = "gzip, deflate"
PIECE = 64 * 1024  # decoded bytes produced per step, whatever one raw chunk holds
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class UnsupportedEncoding(ValueError):
    """The body's Content-Encoding is not one this client decodes."""


def decoded(raw: Iterable[bytes], content_encoding: str) -> Iterator[bytes]:
    """`raw` with the encodings of `content_encoding` (applied in order) undone, in
    pieces of at most PIECE bytes. Raises UnsupportedEncoding, or zlib.error for a body
    that is not what it says."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    chunks: Iterator[bytes] = iter(raw)
    for coding in reversed(codings):  # the last one applied is undone first
        if coding == "identity":
            continue
        if coding not in _WBITS:
            raise UnsupportedEncoding(coding)
        chunks = _inflate(chunks, _WBITS[coding])
    return chunks


def _inflate(chunks: Iterator[bytes], wbits: int) -> Iterator[bytes]:
    inflater = zlib.decompressobj(wbits)
    for chunk in chunks:
        data = chunk
        while data:
            piece = inflater.decompress(data, PIECE)
            if piece:
                yield piece
            data = inflater.unconsumed_tail
    # Everything was fed through `unconsumed_tail` already; what is left is the few bytes
    # zlib holds back, not a body's worth.
    rest = inflater.flush()
    if rest:
        yield rest
