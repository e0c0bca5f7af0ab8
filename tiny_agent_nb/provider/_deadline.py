"""A deadline for a whole request: connect, send, response head and body.

httpx bounds each socket operation, never a request (encode/httpx#1450), so a server that
sends one byte per read timeout, in the head or the body, holds a request for ever. Here
every socket operation of the client's connections waits at most the time left before the
deadline of the request the calling thread is making (`within`), and fails as a timeout of
its kind past it. Sync httpx makes a request in the caller's thread, so that is the thread
whose deadline applies; a Ctrl-C reaches it as before.

The same thread is told, every WAIT_EVERY the server sends nothing, that it is still
waiting (`within`'s `waiting`): a read's wait is cut into slices and `waiting` runs
between two of them, on the thread that waits, so a notebook counts the seconds and reads
its Stop button there without a thread of its own. A read that timed out has taken
nothing from the connection (a plain socket's `recv`; TLS keeps a partial record in
OpenSSL's buffer, and TLS in TLS reads the socket before it feeds the record), so the
next slice reads on where it stopped. The read's own timeout and the deadline still
count from its start.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

# .left: seconds to the deadline of this thread's request; .waiting: told of each silence
_requests = threading.local()
WAIT_EVERY = 1.0  # s: a silence of the server this long, and `waiting` is told


@contextmanager
def within(left: Callable[[], float], waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """Requests made in this block end when `left()` (seconds) reaches 0; `waiting` is
    called each time a read has waited WAIT_EVERY more (what it raises ends the read)."""
    _requests.left, _requests.waiting = left, waiting
    try:
        yield
    finally:
        _requests.left = _requests.waiting = None


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
        waiting: Callable[[], None] | None = getattr(_requests, "waiting", None)
        if waiting is None:
            return self._stream.read(max_bytes, _clamped(timeout, httpcore.ReadTimeout))
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            own = None if end is None else end - time.monotonic()
            if own is not None and own <= 0:
                raise httpcore.ReadTimeout("timed out")
            bound = _clamped(own, httpcore.ReadTimeout)
            last = bound is not None and bound <= WAIT_EVERY
            try:
                return self._stream.read(max_bytes, bound if last else WAIT_EVERY)
            except httpcore.ReadTimeout:
                if last:
                    raise
            waiting()

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

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)
