"""A deadline for a whole request: connect, send, response head and body.

httpx bounds each socket operation, never a request (encode/httpx#1450), so a server that
sends one byte per read timeout, in the head or the body, holds a request for ever. Here
every socket operation of the client's connections waits at most the time left before the
deadline of the request the calling thread is making (`within`), and fails as a timeout of
its kind past it. Sync httpx makes a request in the caller's thread, so that is the thread
whose deadline applies; a Ctrl-C reaches it as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

_requests = threading.local()  # .left: seconds to the deadline of this thread's request


@contextmanager
def within(left: Callable[[], float]) -> Iterator[None]:
    """Requests made in this block end when `left()` (seconds) reaches 0."""
    _requests.left = left
    try:
        yield
    finally:
        _requests.left = None


def bind_deadlines(client: httpx.Client) -> None:
    """Give the connections of `client`'s HTTP transports (the proxies' too) the deadline
    of `within`. httpx offers no public hook for it: its pools' network backend is swapped."""
    # Private attributes of httpx and httpcore; a transport a test injects has no pool.
    transports = [client._transport, *client._mounts.values()]
    for pool in (getattr(t, "_pool", None) for t in transports):
        if isinstance(pool, httpcore.ConnectionPool):
            pool._network_backend = _Backend(pool._network_backend)


def _clamped(timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
    left: Callable[[], float] | None = getattr(_requests, "left", None)
    if left is None:
        return timeout
    seconds = left()
    if seconds <= 0:
        raise expired("the request's deadline has passed")
    return seconds if timeout is None else min(timeout, seconds)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _clamped(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _clamped(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        timeout = _clamped(timeout, httpcore.ConnectTimeout)
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _clamped(timeout, httpcore.ConnectTimeout)
        return _Stream(
            self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        timeout = _clamped(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)
