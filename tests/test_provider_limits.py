"""An answer that never ends cannot hold the kernel or its memory: every attempt is cut at
`max_response_bytes` or `attempt_timeout`, through a real socket, in bounded time."""

from __future__ import annotations

import gc
import gzip
import itertools
import json
import math
import struct
import threading
import time
import tracemalloc
import zlib
from typing import Any

import pytest

from tiny_agent_nb.notebook import NotebookRuntime, TinyAgent
from tiny_agent_nb.provider import (
    ATTEMPT_TIMEOUT,
    MAX_RESPONSE_BYTES,
    Provider,
    ProviderConfig,
    ProviderError,
)

from helpers.misbehaving_server import MisbehavingServer, Script, forever, once
from helpers.provider_helpers import verbatim

# Most of these tests wait on a socket until an attempt_timeout or a read cuts it. Handed
# out together (a parallel run gives a file's tests to every worker at once), they left
# both cores idle for seconds of every whole run; in one group they run one after
# another on one worker while the others compute.
pytestmark = pytest.mark.xdist_group("provider_limits")

USER = b'{"role":"user","content":"hi"}'
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"la "}}]}\n\n'


# Every attempt here ends well within this (each limit it is cut at is a second or less,
# or a few hundred KiB); without its limit it would never end (an endless answer, a read
# timeout of an hour), so waiting this long for the error is the event, not a speed claim.
ENDS_WITHIN_S = 120.0


class Clock:
    """time.monotonic, as the provider reads it: `readings` keeps every value it got."""

    def __init__(self) -> None:
        self.readings: list[float] = []

    def __call__(self) -> float:
        self.readings.append(time.monotonic())
        return self.readings[-1]

    def span(self) -> float:
        """From the provider's first reading to its last: how late it cut the attempt."""
        return self.readings[-1] - self.readings[0]


def ask(server: MisbehavingServer, **config: Any) -> ProviderError:
    """The error one request ends in, from a thread: a request that never ends fails
    the test after ENDS_WITHIN_S instead of hanging the run."""
    settings: dict[str, Any] = {"model": "m", "base_url": server.base_url, **config}
    clock = settings.pop("clock", time.monotonic)
    ended: list[BaseException] = []

    def request() -> None:
        with Provider(ProviderConfig(**settings), clock=clock) as provider:
            try:
                provider.complete(verbatim(USER), [])
            except BaseException as exc:  # handed to the test below
                ended.append(exc)

    thread = threading.Thread(target=request, daemon=True)
    thread.start()
    thread.join(ENDS_WITHIN_S)
    assert not thread.is_alive(), f"the request was not cut within {ENDS_WITHIN_S}s"
    assert ended, "the request ended without an error"
    if not isinstance(ended[0], ProviderError):
        raise ended[0]
    return ended[0]


LIMIT = 256 * 1024


@pytest.mark.parametrize(
    ("script", "content_type", "stream"),
    [
        (forever(EVENT), "text/event-stream", True),
        (
            lambda: itertools.chain([(b"data: ", 0.0)], forever(b"x" * 4096)()),
            "text/event-stream",
            True,
        ),
        (
            lambda: itertools.chain([(b'{"choices":[', 0.0)], forever(b"[" * 4096)()),
            "application/json",
            False,
        ),
        (lambda: itertools.chain([(b'{"a":"', 0.0)], forever(b"y" * 4096)()), None, False),
    ],
    ids=["endless-stream", "stream-without-newlines", "endless-json-body", "untyped-endless-body"],
)
def test_an_answer_larger_than_max_response_bytes_is_cut_and_not_retried(
    script: Script, content_type: str | None, stream: bool
) -> None:
    with MisbehavingServer(script, content_type=content_type or "") as server:
        error = ask(server, max_response_bytes=LIMIT, stream=stream)
        # the connection was closed, not left open
        assert server.client_gone.wait(ENDS_WITHIN_S)
    assert (error.kind, error.retryable) == ("protocol", False)
    assert "more than 256 KB" in error.message and "max_response_bytes" in error.message
    assert "none of it was kept" in error.message
    assert server.bytes_sent < 64 * LIMIT  # read no further than needed (plus socket buffers)


@pytest.mark.parametrize(
    ("script", "content_type"),
    [
        (forever(b": ping\n\n", 0.02), "text/event-stream"),  # keep-alives, never an answer
        (lambda: ((bytes([b]), 0.05) for b in itertools.cycle(EVENT)), "text/event-stream"),
        (lambda: ((b" ", 0.05) for _ in itertools.count()), "application/json"),  # 20 B/s
    ],
    ids=["pings-forever", "byte-by-byte-stream", "trickled-json"],
)
def test_an_answer_still_arriving_after_attempt_timeout_is_cut_and_retryable(
    script: Script, content_type: str
) -> None:
    clock = Clock()
    with MisbehavingServer(script, content_type=content_type) as server:
        error = ask(server, attempt_timeout=1.0, read_timeout=5.0, clock=clock)
        assert server.client_gone.wait(ENDS_WITHIN_S)
    assert (error.kind, error.retryable) == ("timeout", True)
    assert "still answering after 1s" in error.message and "attempt_timeout" in error.message
    assert clock.span() >= 1.0  # not before the attempt_timeout, by the provider's clock


def gzip_of_spaces(mib: int) -> bytes:
    """gzip of "{" and `mib` MiB of spaces, made in milliseconds where gzip.compress takes
    seconds: after a full flush deflate starts afresh, so every MiB deflates to the same
    bytes, written once and repeated (the header and trailer as RFC 1952 has them)."""
    block = b" " * (1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    head = deflate.compress(b"{") + deflate.flush(zlib.Z_FULL_FLUSH)
    piece = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(b"{")
    for _ in range(mib):
        crc = zlib.crc32(block, crc)
    size = (1 + (mib << 20)) & 0xFFFFFFFF
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + head + piece * mib + deflate.flush() + struct.pack("<II", crc, size)


def test_gzip_of_spaces_is_the_gzip_of_its_text() -> None:
    assert gzip.decompress(gzip_of_spaces(3)) == b"{" + b" " * (3 << 20)


def test_a_compressed_body_is_cut_at_max_response_bytes_as_it_inflates() -> None:
    """A 7 KB `gzip, gzip` body inflated to 8 GB inside httpx, in one call, before the
    byte limit saw anything. Decoded in bounded pieces, it is cut at the limit."""
    bomb = gzip.compress(gzip_of_spaces(200), compresslevel=9)
    assert len(bomb) < 64 * 1024
    headers = {"content-encoding": "gzip, gzip"}
    with MisbehavingServer(once(bomb), content_type="application/json", headers=headers) as s:
        tracemalloc.start()
        try:
            error = ask(s, max_response_bytes=LIMIT)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert (error.kind, error.retryable) == ("protocol", False)
    assert "more than 256 KB" in error.message
    assert peak < 16 * 1024 * 1024  # not the 200 MB the body inflates to
    assert s.accept_encoding == ["gzip, deflate"]


def test_a_body_in_an_encoding_not_asked_for_is_refused_clearly() -> None:
    headers = {"content-encoding": "br"}
    with MisbehavingServer(
        once(b"\x0b\x02\x80{}\x03"), content_type="application/json", headers=headers
    ) as s:
        error = ask(s)
    assert (error.kind, error.retryable) == ("protocol", False)
    assert "encoding this client does not decode (br)" in error.message


def test_a_trickled_error_body_is_cut_at_attempt_timeout_too() -> None:
    trickle = lambda: ((b"x", 0.05) for _ in itertools.count())  # noqa: E731
    with MisbehavingServer(trickle, status=500, content_type="text/plain") as server:
        error = ask(server, attempt_timeout=1.0, read_timeout=5.0)
    assert error.kind == "timeout" and "still answering" in error.message


def test_a_silent_server_is_cut_at_attempt_timeout_when_that_comes_first() -> None:
    # Headers, then nothing until the test ends: only the attempt_timeout can end the read
    # before ENDS_WITHIN_S (the read_timeout is an hour).
    silent = lambda: iter([(b"", 3600.0)])  # noqa: E731
    clock = Clock()
    with MisbehavingServer(silent, content_type="text/event-stream") as server:
        error = ask(server, attempt_timeout=0.5, read_timeout=3600.0, clock=clock)
    assert error.kind == "timeout" and "still answering after 0.5s" in error.message
    assert clock.span() >= 0.5


def test_the_attempt_clock_is_injectable_and_defaults_to_thirty_minutes() -> None:
    """The default limit, checked without waiting for it: the clock jumps past it."""
    assert ATTEMPT_TIMEOUT == 1800 and MAX_RESPONSE_BYTES == 64 * 1024 * 1024
    ticks = iter([0.0, 60.0, ATTEMPT_TIMEOUT - 1])
    clock = lambda: next(ticks, ATTEMPT_TIMEOUT + 1)  # noqa: E731
    with MisbehavingServer(forever(b": ping\n\n", 0.01), content_type="text/event-stream") as s:
        error = ask(s, clock=clock)
    assert "still answering after 1800s" in error.message


def test_an_answer_just_under_the_limits_is_read_whole() -> None:
    events = [EVENT] * 50 + [
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    body = b"".join(events)
    with MisbehavingServer(once(body), content_type="text/event-stream") as s:
        config = ProviderConfig(model="m", base_url=s.base_url, max_response_bytes=len(body))
        with Provider(config) as provider:
            completion = provider.complete(verbatim(USER), [])
    assert completion.message.content == "la " * 50


def test_a_stream_event_nested_past_the_decoder_is_a_protocol_error_not_a_crash() -> None:
    # Each parse below reaches the recursion limit. On Python 3.10 the C decoder counts its
    # depth against that limit, so a garbage collection there (of an earlier test's sockets
    # or suspended generators) runs their finalizers with no room left, and pytest fails
    # the test on the "unraisable" RecursionError. Collect first: the garbage is not ours.
    deep = b"data: " + b"[" * 100_000 + b"\n\n"
    gc.collect()
    with MisbehavingServer(once(deep), content_type="text/event-stream") as s:
        error = ask(s)
    assert error.kind == "protocol" and "nested too deeply" in error.message
    gc.collect()
    with MisbehavingServer(once(deep[6:]), content_type="application/json") as s:
        error = ask(s, stream=False)
    assert error.kind == "protocol"
    body = json.dumps({"error": {"message": "x"}}).encode()[:-1] + b"," + b'"d":' + b"[" * 100_000
    gc.collect()
    with MisbehavingServer(once(body), status=400, content_type="application/json") as s:
        error = ask(s)
    assert error.kind == "http" and error.status == 400


def test_the_limits_are_tinyagent_traits_that_reach_the_provider() -> None:
    configured = NotebookRuntime(TinyAgent(attempt_timeout=5.5, max_response_bytes=1000), {})
    config = configured.provider.provider_config()
    assert (config.attempt_timeout, config.max_response_bytes) == (5.5, 1000)
    default = NotebookRuntime(TinyAgent(), {}).provider.provider_config()
    assert (default.attempt_timeout, default.max_response_bytes) == (
        ATTEMPT_TIMEOUT,
        MAX_RESPONSE_BYTES,
    )
    for bad in ({"attempt_timeout": 0}, {"attempt_timeout": math.nan}, {"max_response_bytes": -1}):
        with pytest.raises(ValueError, match="must be positive"):
            TinyAgent(**bad)
