"""A loopback HTTP server that misbehaves on purpose: its body is whatever a script
yields, byte by byte if need be, for as long as the script yields and the client listens.

    with MisbehavingServer(forever(b": ping\\n\\n", 0.02), content_type="text/event-stream") as s:
        Provider(ProviderConfig(model="m", base_url=s.base_url)).complete(...)

Request n is answered by `scripts[n]` (the last one again once they run out). The body is
close-delimited (no length, no chunking), so nothing in the framing bounds it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# What the server writes: an iterator of (bytes, seconds to wait before writing them).
Script = Callable[[], Iterator[tuple[bytes, float]]]


class MisbehavingServer:
    """`status` and `content_type` for every request, then its script's bytes."""

    def __init__(
        self,
        *scripts: Script,
        status: int = 200,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.stop = threading.Event()
        self.requests = 0
        self.client_gone = threading.Event()
        self.bytes_sent = 0
        self.accept_encoding: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                script = scripts[min(outer.requests, len(scripts) - 1)]
                outer.requests += 1
                outer.accept_encoding.append(self.headers.get("accept-encoding", ""))
                self.send_response(status)
                self.send_header("content-type", content_type)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
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
    """`data` again and again, `pause` seconds apart."""
    return lambda: ((data, pause) for _ in itertools.count())


def once(data: bytes) -> Script:
    return lambda: iter([(data, 0.0)])
