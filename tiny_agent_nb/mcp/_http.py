"""The HTTP client a streamable-HTTP server is reached through: what it answers is read
decoded in bounded pieces, and a message past the server's limit (decoded) is refused.

The SDK reads a JSON answer whole (`response.aread()`), and httpx2 inflates a gzip body
as it comes: a 0.5 MB gzip body of a tools/call result grew the kernel to 2.6 GB. Here a
response hook takes over the body before anyone reads it: the provider's `BodyDecoder`
inflates it a piece at a time (gzip and deflate only, all the client asks for) and it is
counted as it grows. An answer past the limit, in an encoding not asked for, or that does
not decode ends in `RefusedAnswer`, which the SDK turns into an error for the request it
answered (the call is an error result and the server goes on); `on_refused` says why.

Imported only when an HTTP server starts, with httpx2 (the SDK's HTTP client).
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2

from .._exceptions import TinyAgentError
from ..provider import ACCEPT_ENCODING, BodyDecoder, UnsupportedEncoding
from ..words import byte_size


class RefusedAnswer(TinyAgentError, httpx2.StreamError):
    """A server's answer that is not read: past the limit, or not decodable. (A
    StreamError: the SDK answers the request with an error for it, rather than ending
    the session, as any other exception raised while reading would.)"""


def bounded_client(
    headers: dict[str, str],
    *,
    limit: int,
    on_status: Callable[[httpx2.Response], Any],
    on_refused: Callable[[str], None],
) -> httpx2.AsyncClient:
    """The client for one server: its configured headers, the SDK's recommended timeouts
    (a response stream may stay open for minutes), `on_status` called with each
    response, and every body bounded as the module says."""

    async def bound(response: httpx2.Response) -> None:
        await on_status(response)
        response.stream = _Decoded(response, limit, on_refused)

    own = {k: v for k, v in headers.items() if k.lower() != "accept-encoding"}
    return httpx2.AsyncClient(
        headers={**own, "accept-encoding": ACCEPT_ENCODING},  # all the decoder reads
        timeout=httpx2.Timeout(30.0, read=300.0),
        event_hooks={"response": [bound]},
    )


class _Decoded(httpx2.AsyncByteStream):
    def __init__(
        self, response: httpx2.Response, limit: int, on_refused: Callable[[str], None]
    ) -> None:
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        self._raw = response.stream
        self._on_refused = on_refused
        self._size = 0
        # An event stream may stay open for the session: the SDK bounds each of its
        # events (1 MB) instead.
        content_type = response.headers.get("content-type", "").partition(";")[0]
        self._limit = None if content_type.strip().lower() == "text/event-stream" else limit
        self._decoder: BodyDecoder | str  # a string: why the body cannot be read
        try:
            self._decoder = BodyDecoder(response.headers.get("content-encoding", ""))
        except UnsupportedEncoding as exc:  # refused when read, where the SDK can answer it
            self._decoder = f"its answer came in an encoding this client does not read ({exc})"
        # The body is decoded here: httpx2 must not decode it again.
        response.headers.pop("content-encoding", None)
        response.headers.pop("content-length", None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        decoder = self._decoder
        if isinstance(decoder, str):
            raise self._refused(decoder)
        try:
            async for chunk in self._raw:
                for piece in decoder.decode(chunk):
                    yield self._counted(piece)
            for piece in decoder.flush():
                yield self._counted(piece)
        except zlib.error as exc:
            raise self._refused(f"its answer does not decode as it says ({exc})") from None

    def _counted(self, piece: bytes) -> bytes:
        self._size += len(piece)
        if self._limit is not None and self._size > self._limit:
            raise self._refused(
                f"its answer was larger than {byte_size(self._limit)} once decoded, "
                "and was not read"
            )
        return piece

    def _refused(self, why: str) -> RefusedAnswer:
        self._on_refused(why)
        return RefusedAnswer(why)

    async def aclose(self) -> None:
        await self._raw.aclose()
