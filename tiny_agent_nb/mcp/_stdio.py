"""A stdio server's transport, with every line it writes bounded; and the last 4 KB of its
stderr, for the line that says why it failed.

The SDK's `stdio_client` gathers a line until its newline, however long: a server that
writes gigabytes without one grows the kernel as long as it writes. This is the same
transport (the process in a session of its own, newline-delimited JSON-RPC both ways,
the MCP shutdown sequence: close stdin, wait, then end the process group) with one
difference: a line past `limit` bytes is not read. It cannot be answered (which request
it was for is in the line), so the connection ends there: `on_refused` says why, the
session sees the server gone, the call waiting on it is an error result at once, and
the next run starts the server again. What the server writes after it is read and
dropped until the server is stopped, so it is never blocked on a full pipe.

POSIX only: on Windows the SDK's own `stdio_client` runs the server (unbounded lines, its
stderr to the kernel process's own). Imported only when a stdio server starts.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import mcp_types
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from .._guard import guard_argv
from ..words import byte_size
from ._config import ServerConfig

STDERR_TAIL = 4096  # bytes of a stdio server's stderr kept for the "failed" line
# The SDK's shutdown timings (mcp.client.stdio): the grace for the server to exit once
# its stdin is closed, then between SIGTERM and SIGKILL of its group.
EXIT_GRACE = 2.0
KILL_GRACE = 2.0
FLUSH_GRACE = 0.5  # for the writer to send what the session handed it
STDERR_GRACE = 1.0  # for the server's last words once it is stopped


class StderrTail:
    """The end of what a stdio server wrote to its stderr: kept in memory, never in the
    kernel's own stderr (a server's noise does not belong in the cell) nor on disk (it
    may echo secrets)."""

    def __init__(self) -> None:
        self.data = b""

    def last_line(self) -> str:
        text = self.data.decode("utf-8", errors="replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return lines[-1][:300] if lines else ""


@contextlib.asynccontextmanager
async def bounded_stdio_client(
    server: ServerConfig, stderr: StderrTail, *, limit: int, on_refused: Callable[[str], None]
) -> AsyncIterator[tuple[Any, Any]]:
    """(read stream, write stream) of the running `server`, as `stdio_client` yields."""
    assert server.command is not None
    # Under the guard: the server (and all it started) dies with the kernel, even a
    # SIGKILLed one, which can run no cleanup of its own.
    command, args = guard_argv(server.command, server.args)
    env = dict(server.env) or None
    if sys.platform == "win32":  # pragma: no cover (the guard is POSIX too)
        parameters = StdioServerParameters(command=command, args=args, env=env, cwd=server.cwd)
        async with stdio_client(parameters, errlog=sys.__stderr__) as streams:
            yield streams
        return
    process = await anyio.open_process(
        [command, *args],
        env=get_default_environment() | (env or {}),
        stderr=subprocess.PIPE,
        cwd=server.cwd,
        start_new_session=True,  # its group is ended with it
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done, stderr_done = anyio.Event(), anyio.Event()

    async def read_lines() -> None:
        assert process.stdout is not None
        reading = True
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with read_writer:
                buffer = bytearray()
                async for chunk in process.stdout:
                    if not reading:
                        continue  # drained: the server must not block on a full pipe
                    seen = len(buffer)
                    buffer += chunk
                    while (end := buffer.find(b"\n", seen)) >= 0:
                        line = buffer[:end].decode("utf-8", errors="replace")
                        del buffer[: end + 1]
                        seen = 0
                        try:
                            await read_writer.send(_parsed(line))
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            reading = False  # the session is gone: drain
                            break
                    if reading and len(buffer) > limit:
                        on_refused(
                            f"it wrote a line longer than {byte_size(limit)} to its "
                            "stdout, which was not read; it was stopped"
                        )
                        reading, buffer = False, bytearray()
                        await read_writer.aclose()  # the session sees the server gone

    async def write_lines() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode("utf-8", errors="replace"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server may still run: the session must see the connection end rather
            # than a request that waits forever.
            await read_writer.aclose()
        finally:
            writer_done.set()

    async def read_stderr() -> None:
        assert process.stderr is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stderr:
                stderr.data = (stderr.data + chunk)[-STDERR_TAIL:]
        stderr_done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(read_lines)
        group.start_soon(write_lines)
        group.start_soon(read_stderr)
        try:
            yield read_stream, write_stream
        finally:
            # Bounded whatever happens (every wait has its limit), even when cancelled:
            # the server must not outlive the session.
            with anyio.CancelScope(shield=True):
                read_stream.close()
                write_stream.close()
                with anyio.move_on_after(FLUSH_GRACE):
                    await writer_done.wait()
                await _stop(process)
                # Whatever inherited its stderr may hold it open: bounded too.
                with anyio.move_on_after(STDERR_GRACE):
                    await stderr_done.wait()
            group.cancel_scope.cancel()


async def _stop(process: anyio.abc.Process) -> None:
    """Close its stdin, give it EXIT_GRACE to exit, then end its process group."""
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    if not await _exited(process, EXIT_GRACE):
        await terminate_posix_process_tree(process, KILL_GRACE)
        await _exited(process, KILL_GRACE)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    # Polled, not process.wait(): that also waits for the pipes' EOF, which a child
    # that inherited them can hold back.
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None


def _parsed(line: str) -> SessionMessage | Exception:
    """One line as a message, or the error the session reports for it."""
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc
