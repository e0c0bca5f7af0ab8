"""An answer that never ends cannot hold the kernel or its memory: every attempt is cut at
`max_response_bytes` or `attempt_timeout`, through a real socket, in bounded time."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tiny_agent_nb.provider import Provider, ProviderConfig, ProviderError
from tiny_agent_nb.provider._types import ATTEMPT_TIMEOUT, MAX_RESPONSE_BYTES

USER = b'{"role":"user","content":"hi"}'
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"la "}}]}\n\n'

# What the server writes: an iterator of (bytes, seconds to wait before writing them).
Script = Callable[[], Iterator[tuple[bytes, float]]]


class MisbehavingServer:
    """A loopback HTTP server whose body is whatever `script` yields, for as long as it
    yields and the client listens (close-delimited: no length, no chunking)."""

    def __init__(self, script: Script, *, status: int = 200, content_type: str) -> None:
        self.stop = threading.Event()
        self.client_gone = threading.Event()
        self.bytes_sent = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("connection", "close")
                self.end_headers()
                try:
                    for data, pause in script():
                        if pause and outer.stop.wait(pause):
                            return
                        self.wfile.write(data)
                        self.wfile.flush()
                        outer.bytes_sent += len(data)
                except OSError:  # the client hung up: what every test here waits for
                    outer.client_gone.set()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> MisbehavingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def forever(data: bytes, pause: float = 0.0) -> Script:
    return lambda: ((data, pause) for _ in itertools.count())


def ask(server: MisbehavingServer, **config: Any) -> tuple[ProviderError, float]:
    settings: dict[str, Any] = {"model": "m", "base_url": server.base_url, **config}
    clock = settings.pop("clock", time.monotonic)
    started = time.monotonic()
    with (
        Provider(ProviderConfig(**settings), clock=clock) as provider,
        pytest.raises(ProviderError) as info,
    ):
        provider.complete([USER], [])
    return info.value, time.monotonic() - started


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
        error, elapsed = ask(server, max_response_bytes=LIMIT, stream=stream)
        assert server.client_gone.wait(10)  # the connection was closed, not left open
    assert (error.kind, error.retryable) == ("protocol", False)
    assert "more than 256 KiB" in error.message and "max_response_bytes" in error.message
    assert "none of it was kept" in error.message
    assert server.bytes_sent < 64 * LIMIT  # read no further than needed (plus socket buffers)
    assert elapsed < 20


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
    with MisbehavingServer(script, content_type=content_type) as server:
        error, elapsed = ask(server, attempt_timeout=1.0, read_timeout=5.0)
        assert server.client_gone.wait(10)
    assert (error.kind, error.retryable) == ("timeout", True)
    assert "still answering after 1s" in error.message and "attempt_timeout" in error.message
    assert 1.0 <= elapsed < 10


def test_a_trickled_error_body_is_cut_at_attempt_timeout_too() -> None:
    trickle = lambda: ((b"x", 0.05) for _ in itertools.count())  # noqa: E731
    with MisbehavingServer(trickle, status=500, content_type="text/plain") as server:
        error, elapsed = ask(server, attempt_timeout=1.0, read_timeout=5.0)
    assert error.kind == "timeout" and "still answering" in error.message
    assert elapsed < 10


def test_a_silent_server_is_cut_at_attempt_timeout_when_that_comes_first() -> None:
    silent = lambda: iter([(b"", 30.0)])  # noqa: E731  headers, then nothing
    with MisbehavingServer(silent, content_type="text/event-stream") as server:
        error, elapsed = ask(server, attempt_timeout=0.5, read_timeout=60.0)
    assert error.kind == "timeout" and "still answering after 0.5s" in error.message
    assert elapsed < 10


def test_the_attempt_clock_is_injectable_and_defaults_to_thirty_minutes() -> None:
    """The default limit, checked without waiting for it: the clock jumps past it."""
    assert ATTEMPT_TIMEOUT == 1800 and MAX_RESPONSE_BYTES == 64 * 1024 * 1024
    ticks = iter([0.0, 60.0, ATTEMPT_TIMEOUT - 1])
    clock = lambda: next(ticks, ATTEMPT_TIMEOUT + 1)  # noqa: E731
    with MisbehavingServer(forever(b": ping\n\n", 0.01), content_type="text/event-stream") as s:
        error, elapsed = ask(s, clock=clock)
    assert "still answering after 1800s" in error.message
    assert elapsed < 10


def test_an_answer_just_under_the_limits_is_read_whole() -> None:
    events = [EVENT] * 50 + [
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    body = b"".join(events)
    with MisbehavingServer(lambda: iter([(body, 0.0)]), content_type="text/event-stream") as s:
        config = ProviderConfig(model="m", base_url=s.base_url, max_response_bytes=len(body))
        with Provider(config) as provider:
            completion = provider.complete([USER], [])
    assert completion.message.content == "la " * 50


def test_a_stream_event_nested_past_the_decoder_is_a_protocol_error_not_a_crash() -> None:
    deep = b"data: " + b"[" * 100_000 + b"\n\n"
    with MisbehavingServer(lambda: iter([(deep, 0.0)]), content_type="text/event-stream") as s:
        error, _ = ask(s)
    assert error.kind == "protocol" and "nested too deeply" in error.message
    with MisbehavingServer(lambda: iter([(deep[6:], 0.0)]), content_type="application/json") as s:
        error, _ = ask(s, stream=False)
    assert error.kind == "protocol"
    body = json.dumps({"error": {"message": "x"}}).encode()[:-1] + b"," + b'"d":' + b"[" * 100_000
    with MisbehavingServer(
        lambda: iter([(body, 0.0)]), status=400, content_type="application/json"
    ) as s:
        error, _ = ask(s)
    assert error.kind == "http" and error.status == 400
