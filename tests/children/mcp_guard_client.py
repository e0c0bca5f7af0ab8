"""An MCP client for tests/test_mcp_guard.py, on the SDK's own stdio transport, starting
its server under the guard (as the MCP package does).

    python mcp_guard_client.py --session STATUS_FILE
    python mcp_guard_client.py --hold -- COMMAND [ARG...]

--session: starts the published reference server `mcp-server-time`, initializes, prints
`tools NAME...`, then leaves the session and the transport as any client does (the SDK
closes the server's stdin, and signals it only after a grace) and prints `closed`. The
server runs under a shell that writes its exit status to STATUS_FILE once it exits by
itself; a server ended by a signal takes the shell's process group (and so the shell) with
it, and nothing is written.
--hold: starts COMMAND through the transport, prints `started` and blocks reading stdin
(the test SIGKILLs it).
"""

from __future__ import annotations

import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tiny_agent_nb._guard import guard_argv


def guarded(command: str, args: list[str]) -> StdioServerParameters:
    executable, argv = guard_argv(command, args)
    return StdioServerParameters(command=executable, args=argv)


async def session(status_file: str) -> None:
    script = '"$0" -m mcp_server_time; echo $? > "$1"'
    server = guarded("/bin/sh", ["-c", script, sys.executable, status_file])
    async with stdio_client(server) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        tools = await client.list_tools()
        print("tools", *sorted(tool.name for tool in tools.tools), flush=True)
    print("closed", flush=True)


async def hold(command: str, args: list[str]) -> None:
    async with stdio_client(guarded(command, args)):
        print("started", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    if sys.argv[1] == "--session":
        anyio.run(session, sys.argv[2])
    else:
        anyio.run(hold, sys.argv[3], sys.argv[4:])
