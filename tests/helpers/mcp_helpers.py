"""Starting the SDK-written test server (tests/helpers/mcp_test_server.py) for MCP tests.

    config = parse_config({"mcpServers": {"t": stdio_entry()}})
    with HttpTestServer(authorization="Bearer x") as http:   # http.url
        ...
    with started(config) as (servers, lines):                # McpServers, closed after
        tool = tool_named(servers, "t__echo")

Every server is forked by this process's zygote (tests/helpers/mcp_zygote.py, started at the first
use), which imported the SDK once: a start costs a fork, not the SDK's import.
Loopback only; every wait is polled with a deadline.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tiny_agent_nb.mcp import McpConfig, McpServers
from tiny_agent_nb.mcp._tool import McpTool

from helpers.mcp_zygote import Forked, fork_server

TEST_SERVER = Path(__file__).resolve().parent / "mcp_test_server.py"
ZYGOTE = Path(__file__).resolve().parent / "mcp_zygote.py"
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


# The misbehaviours that never speak MCP: the server handles them before the SDK's import,
# so they start as a process of their own, as cheap as a fork and with no zygote to wait for.
SPEAKS_NO_MCP = frozenset({"--hang", "--exit-at-once"})
_zygote_lock = threading.Lock()
_zygote_socket: str | None = None


def zygote() -> str:
    """The socket of this process's zygote, started at the first call, ended at exit."""
    global _zygote_socket  # noqa: PLW0603 (one zygote per test process)
    with _zygote_lock:
        if _zygote_socket is None:
            directory = tempfile.mkdtemp(prefix="mcp-zygote-")
            path = str(Path(directory) / "socket")
            process = subprocess.Popen(
                [sys.executable, str(ZYGOTE), path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                # Its own session: a Ctrl-C meant for the test run does not reach it or
                # the servers it forks (they end with what started them).
                start_new_session=True,
            )
            assert process.stdin is not None and process.stdout is not None
            ready = process.stdout.readline()
            if ready != b"ready\n":
                process.kill()
                raise RuntimeError(f"the MCP test zygote did not start: {ready!r}")
            atexit.register(_end_zygote, process)
            _zygote_socket = path
        return _zygote_socket


def _end_zygote(process: subprocess.Popen[bytes]) -> None:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.close()  # its end of the run: it removes its directory
    process.wait(10)
    process.stdout.close()


def stdio_entry(
    *flags: str, env: dict[str, str] | None = None, forked: bool = True
) -> dict[str, Any]:
    """The `mcpServers` entry of the test server over stdio (`flags`: its misbehaviours);
    `forked=False`: a process of its own, not forked by the zygote."""
    args = [str(TEST_SERVER), "stdio", *flags]
    if forked and not SPEAKS_NO_MCP.intersection(flags):
        args[1:1] = ["--zygote", zygote()]
    entry: dict[str, Any] = {"command": sys.executable, "args": args}
    if env:
        entry["env"] = env
    return entry


def process_entry(*argv: str) -> dict[str, Any]:
    """The `mcpServers` entry of a server that is a Python process of its own, not forked
    by the zygote: `argv` after the interpreter (a script, or `-m` and a module)."""
    return {"command": sys.executable, "args": list(argv)}


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
    """The test server over streamable HTTP on 127.0.0.1 (a port of its own choosing),
    forked by the zygote for this process (which stands for it: no process between)."""

    def __init__(self, *, authorization: str | None = None) -> None:
        args = [str(TEST_SERVER), "http"]
        if authorization is not None:
            args += ["--authorization", authorization]
        read, write = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            self.process: Forked = fork_server(zygote(), args, (null, write, null))
        finally:
            os.close(write)
            os.close(null)
        # Open until close(), as a pipe to a child process would be.
        self._stdout = os.fdopen(read, encoding="utf-8")
        line = self._stdout.readline()  # the port, once the socket is bound
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError(f"the MCP test server did not start: {line!r}")
        self.port = int(line)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def kill(self) -> None:
        """SIGKILL the server; return once it is reaped."""
        self.process.signal(signal.SIGKILL)
        self.process.wait()

    def close(self) -> None:
        if self.process.status is None:
            self.kill()
        self.process.close()
        self._stdout.close()

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
