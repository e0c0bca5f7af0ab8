"""A request ends at its deadline whatever the server does: here a loopback server that
sends a status line, then one byte of its head at a time, each well within the read
timeout, so no per-read timeout ever cuts it. The model request fails as a `timeout` at
`attempt_timeout`, the metadata ask gives no window; both hang up while the server still
had most of its head to send, on a new connection and on one kept alive from an answer."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import pytest

from tiny_agent_nb.provider import Provider, ProviderConfig, ProviderError

from helpers.provider_helpers import verbatim

pytestmark = pytest.mark.xdist_group("provider_limits")  # they wait on sockets

HEAD_BYTES = 400  # a head of 20 s at PAUSE: far longer than any deadline here
PAUSE = 0.05
ANSWER = json.dumps(
    {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
).encode()


class TricklingServer:
    """Answers the first `answered` requests of a connection with `ANSWER` (kept alive),
    then trickles the next one's head; `unsent`: the head bytes it had left when the
    client hung up, set once `client_gone` is."""

    def __init__(self, answered: int = 0) -> None:
        self.answered = answered
        self.connections = 0
        self.paths: list[str] = []
        self.unsent = 0
        self.client_gone = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"

    def __enter__(self) -> TricklingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close would not)
        self._thread.join()
        self._listener.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed by __exit__
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as incoming:
            try:
                for n in range(self.answered + 1):
                    self._read_request(incoming)
                    if n < self.answered:
                        head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(ANSWER)}\r\n"
                        conn.sendall(head.encode() + b"content-type: application/json\r\n\r\n")
                        conn.sendall(ANSWER)
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                for sent in range(HEAD_BYTES):
                    if self._stop.wait(PAUSE):
                        return
                    self.unsent = HEAD_BYTES - sent
                    conn.sendall(b"X")
            except OSError:  # the client hung up: what every test here waits for
                self.client_gone.set()

    def _read_request(self, incoming: Any) -> None:
        length = 0
        request_line = incoming.readline()
        self.paths.append(request_line.split()[1].decode())
        while (line := incoming.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        incoming.read(length)


def config(server: TricklingServer, **limits: float) -> ProviderConfig:
    return ProviderConfig(model="m", base_url=server.base_url, **limits)  # type: ignore[arg-type]


def hung_up_early(server: TricklingServer) -> bool:
    assert server.client_gone.wait(30), "the client never hung up"
    return server.unsent > HEAD_BYTES // 2


@pytest.mark.parametrize("answered", [0, 1], ids=["new-connection", "kept-alive-connection"])
def test_a_response_head_trickled_byte_by_byte_is_cut_at_attempt_timeout(answered: int) -> None:
    with TricklingServer(answered) as server:
        with Provider(config(server, attempt_timeout=0.5, read_timeout=5.0)) as provider:
            for _ in range(answered):
                assert provider.complete(verbatim(b'{"role":"user","content":"hi"}'), [])
            with pytest.raises(ProviderError) as info:
                provider.complete(verbatim(b'{"role":"user","content":"hi"}'), [])
        assert hung_up_early(server) and server.connections == 1
    assert (info.value.kind, info.value.retryable) == ("timeout", True)
    assert "still answering after 0.5s" in info.value.message


@pytest.mark.parametrize("answered", [0, 1], ids=["models", "props-on-a-kept-alive-connection"])
def test_metadata_whose_head_trickles_gives_no_window_within_its_deadline(answered: int) -> None:
    # The metadata's one deadline is read_timeout when that is shorter than 5 s.
    with TricklingServer(answered) as server:
        with Provider(config(server, read_timeout=0.5)) as provider:
            assert provider.context_window() is None
        assert hung_up_early(server)
    assert server.paths == ["/v1/models", "/props"][: answered + 1]
