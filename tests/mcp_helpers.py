"""Starting the SDK-written test server (tests/mcp_test_server.py) for MCP tests.

    config = parse_config({"mcpServers": {"t": stdio_entry()}})
    with HttpTestServer(authorization="Bearer x") as http:   # http.url
        ...
    with started(config) as (servers, lines):                # McpServers, closed after
        tool = tool_named(servers, "t__echo")

Loopback only; every wait is polled with a deadline.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tiny_agent_nb.mcp import McpConfig, McpServers, McpTool

TEST_SERVER = Path(__file__).resolve().parent / "mcp_test_server.py"
TEST_SERVER_VERSION = "1.2.3"
TEST_TOOLS = (
    "echo",
    "add",
    "greet",
    "fail",
    "image",
    "structured",
    "with_usage",
    "env",
    "mark_and_sleep",
    "resources",
    "pid",
    "big",
)


def stdio_entry(*flags: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The `mcpServers` entry of the test server over stdio (`flags`: its misbehaviours)."""
    entry: dict[str, Any] = {"command": sys.executable, "args": [str(TEST_SERVER), "stdio", *flags]}
    if env:
        entry["env"] = env
    return entry


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        # "pid (comm) S ...": the state after the last ')'.
        return stat.read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class HttpTestServer:
    """The test server over streamable HTTP on 127.0.0.1 (a port of its own choosing)."""

    def __init__(self, *, authorization: str | None = None) -> None:
        args = [sys.executable, str(TEST_SERVER), "http"]
        if authorization is not None:
            args += ["--authorization", authorization]
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # the port, once the socket is bound
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError(f"the MCP test server did not start: {line!r}")
        self.port = int(line)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> HttpTestServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def started(config: McpConfig, **options: Any) -> Iterator[tuple[McpServers, list[str]]]:
    """McpServers for `config` and the lines its start() returned; closed after."""
    servers = McpServers(config, **options)
    try:
        lines = servers.start()
        yield servers, lines
    finally:
        servers.close()


def tool_named(servers: McpServers, name: str) -> McpTool:
    tools = {tool.name: tool for tool in servers.tools()}
    assert name in tools, f"{name} not in {sorted(tools)}"
    return tools[name]
