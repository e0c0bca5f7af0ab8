"""What one message from an MCP server may take, decoded: an HTTP answer (a gzip body that
inflates to more than the limit) and a stdio line past it are not read; the call is an
error result saying so, and the kernel never holds the whole of it."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.mcp import parse_config
from tiny_agent_nb.tools import ToolContext

from helpers.mcp_helpers import process_entry, started, tool_named

HOSTILE = Path(__file__).resolve().parent / "helpers" / "mcp_hostile_server.py"
LIMIT = 32 * 1024 * 1024  # McpServers' default
OVER = LIMIT + 8 * 1024 * 1024
OBJECT = {"type": "object"}


class GzipBombServer:
    """A streamable-HTTP MCP server on 127.0.0.1, written by hand (JSON answers, no event
    stream): `big` answers with a gzip body that inflates to OVER bytes of one text,
    `small` with "ok"."""

    def __init__(self) -> None:
        self.sent_bytes = 0  # of the gzip body on the wire

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # no server-initiated stream
                self.send_response(405)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_DELETE(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                message = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if "id" not in message:  # a notification
                    self.send_response(202)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                body, encoding = outer.answer(message)
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("mcp-session-id", "s1")
                if encoding:
                    self.send_header("content-encoding", encoding)
                    outer.sent_bytes = len(body)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/mcp"

    def answer(self, message: dict[str, Any]) -> tuple[bytes, str | None]:
        method, ident = message["method"], message["id"]
        params = message.get("params") or {}
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "bomb", "version": "1.0"},
            }
        elif method == "tools/list":
            result = {"tools": [{"name": n, "inputSchema": OBJECT} for n in ("big", "small")]}
        elif method == "tools/call" and params["name"] == "big":
            head = json.dumps({"jsonrpc": "2.0", "id": ident})[:-1].encode()
            body = head + b',"result":{"content":[{"type":"text","text":"' + b"a" * OVER
            return gzip.compress(body + b'"}]}}', compresslevel=9), "gzip"
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "ok"}]}
        else:
            error = {"code": -32601, "message": f"no {method}"}
            return json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}).encode(), None
        return json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode(), None

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


@pytest.fixture
def bomb() -> Iterator[GzipBombServer]:
    server = GzipBombServer()
    yield server
    server.close()


def test_a_gzip_body_that_inflates_past_the_limit_is_an_error_result_and_the_server_goes_on(
    bomb: GzipBombServer, tmp_path: Path
) -> None:
    config = parse_config({"mcpServers": {"b": {"url": bomb.url}}})
    context = ToolContext(workspace=tmp_path)
    with started(config) as (servers, lines):
        assert lines == []
        output = tool_named(servers, "b__big").run({}, context)
        assert bomb.sent_bytes < 100_000  # 40 MB of text in a few tens of KB
        assert output.is_error
        assert output.content == (
            "MCP server b: big failed: its answer was larger than 32 MB once decoded, and "
            "was not read"
        )
        assert tool_named(servers, "b__small").run({}, context).content == "ok"
        assert servers.status()[0].state == "running"


def test_a_stdio_line_past_the_limit_is_an_error_result_and_the_server_is_restarted(
    tmp_path: Path,
) -> None:
    result = {"content": [{"type": "text", "text": "x" * OVER}]}
    script = {"tools": [{"name": "big", "inputSchema": OBJECT}], "results": {"big": result}}
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    entry = process_entry(str(HOSTILE), str(path))
    config = parse_config({"mcpServers": {"h": entry}})
    context = ToolContext(workspace=tmp_path)
    with started(config) as (servers, lines):
        assert lines == []
        output = tool_named(servers, "h__big").run({}, context)
        assert output.is_error
        assert output.content == (
            "MCP server h: big failed: it wrote a line longer than 32 MB to its stdout, "
            "which was not read; it was stopped"
        )
        (status,) = servers.status()
        assert status.state == "failed" and "longer than 32 MB" in (status.detail or "")
        assert servers.start() == []  # the next run starts it again
        assert servers.status()[0].state == "running"
