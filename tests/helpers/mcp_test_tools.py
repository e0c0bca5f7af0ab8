"""The SDK-written MCP server of tests/helpers/mcp_test_server.py: its tools, and serving them over
stdio or streamable HTTP. The tools' names and behaviour are relied on by the notebook
tests: keep them stable. Imported only once a mode that speaks MCP is chosen (the SDK's
import is most of a server process's start-up).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ImageContent, TextContent

VERSION = "1.2.3"
# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

server: MCPServer[Any] = MCPServer(name="tiny-test", version=VERSION)


@server.tool()
def echo(text: str) -> str:
    """Return the text as it was given."""
    return text


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def greet(name: str, greeting: str = "hello") -> str:
    """A greeting (an argument with a default the server fills in)."""
    return f"{greeting} {name}"


@server.tool()
def fail(message: str) -> CallToolResult:
    """A result with isError set, carrying the message."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


@server.tool()
def image() -> CallToolResult:
    """A small PNG."""
    data = base64.b64encode(PNG).decode("ascii")
    return CallToolResult(content=[ImageContent(type="image", data=data, mime_type="image/png")])


@server.tool()
def structured() -> CallToolResult:
    """Structured content only (no text block carries it)."""
    return CallToolResult(content=[], structured_content={"temperature": 21.5, "unit": "C"})


@server.tool()
def with_usage() -> CallToolResult:
    """A result reporting usage of its own in _meta."""
    usage = {"inputTokens": 120, "outputTokens": 30, "cost": 0.0042}
    return CallToolResult.model_validate(
        {"content": [{"type": "text", "text": "summarised"}], "_meta": {"usage": usage}}
    )


@server.tool()
def env(name: str) -> str:
    """The value of an environment variable of the server's process ('' when unset)."""
    return os.environ.get(name, "")


@server.tool()
async def mark_and_sleep(path: str, seconds: float) -> str:
    """Append '<pid> started' to path, sleep, append 'finished' ('cancelled' if cancelled)."""
    _append(path, f"{os.getpid()} started")
    try:
        await asyncio.sleep(seconds)
    except BaseException:
        _append(path, "cancelled")
        raise
    _append(path, "finished")
    return "slept"


@server.tool()
def resources() -> CallToolResult:
    """An embedded text resource, an embedded blob and a resource link."""
    blob = base64.b64encode(bytes(2048)).decode("ascii")
    return CallToolResult.model_validate(
        {
            "content": [
                {"type": "resource", "resource": {"uri": "file:///notes.txt", "text": "hello"}},
                {
                    "type": "resource",
                    "resource": {
                        "uri": "file:///data.bin",
                        "mimeType": "application/zip",
                        "blob": blob,
                    },
                },
                {"type": "resource_link", "uri": "file:///big.csv", "name": "big.csv"},
            ]
        }
    )


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def big(n: int) -> str:
    """n characters."""
    return "".join(chr(ord("a") + i % 26) for i in range(n))


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()


def serve_http(authorization: str | None) -> None:
    import uvicorn  # noqa: PLC0415 (only the http transport needs it)

    app: Any = server.streamable_http_app()
    if authorization is not None:
        app = _require(app, authorization)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before the port is printed: a client may connect at once
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def _require(app: Any, authorization: str) -> Any:
    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode() != authorization:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    return guarded


def add_odd_tool() -> None:
    def odd(x: str) -> str:
        """A tool whose listed input schema is not a valid JSON Schema."""
        return x

    server.add_tool(odd)
    # The schema the server lists, as a buggy server might write it ("type" must be a
    # JSON type name or a list of them).
    server._tool_manager.get_tool("odd").parameters = {  # type: ignore[union-attr]
        "type": "object",
        "properties": {"x": {"type": "text"}},
    }
