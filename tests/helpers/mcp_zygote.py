"""The zygote: a process that imported the MCP test server once and forks a server per start.

Importing the MCP SDK is most of a test server's start-up (its pydantic models are built
at import), and the MCP tests start dozens of servers. A test process starts one zygote
(tests/helpers/mcp_helpers.py); a start of tests/helpers/mcp_test_server.py with
`--zygote SOCKET` then asks it for a server instead of importing the SDK itself:

- the starter connects to SOCKET and sends its argv, environment and working directory,
  with its stdin, stdout and stderr (SCM_RIGHTS);
- the zygote forks a child that takes those three as its own and serves them, exactly as
  `python tests/helpers/mcp_test_server.py ARGS` would, and answers `pid N`;
- once it has reaped the child, the zygote answers `status W` (the wait status).

The starter stands for the server: it forwards SIGTERM, SIGINT and SIGHUP to the child
and exits as the child did, and when its connection closes (it exited or was SIGKILLed,
as the guard ends a server's process group) the child SIGKILLs itself at once. So the
process the SDK started, the guard and the kernel see one server that starts, answers,
ignores or obeys signals and dies as before; the child's pid is the one `pid` reports.

    python tests/helpers/mcp_zygote.py DIR/SOCKET  # "ready" once it listens;
                                                   # at stdin EOF, removes DIR

Stdlib only at import: the starter imports this module for `fork_server`.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

_REQUEST_MAX = 1 << 20  # argv and environment of one start


class Forked:
    """A server the zygote forked, seen from the process that asked for it."""

    def __init__(self, connection: socket.socket, pid: int) -> None:
        self._connection = connection
        self.pid = pid
        self.status: int | None = None  # the wait status, once the zygote reaped it

    def signal(self, signum: int) -> None:
        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def wait(self) -> int:
        """The child's wait status, once it has exited (-1 if the zygote itself is gone)."""
        while self.status is None:
            reply = self._connection.recv(64)
            self.status = int(reply.split()[1]) if reply.startswith(b"status ") else -1
        return self.status

    def close(self) -> None:
        """Let go of the server: a child still running SIGKILLs itself."""
        self._connection.close()


def fork_server(path: str, argv: Sequence[str], fds: Sequence[int]) -> Forked:
    """Ask the zygote at `path` for a server running `argv` (mcp_test_server.py's arguments)
    on `fds` (its stdin, stdout, stderr), in this process's environment and directory."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    connection.connect(path)
    request = {"argv": list(argv), "env": dict(os.environ), "cwd": str(Path.cwd())}
    socket.send_fds(connection, [json.dumps(request).encode()], list(fds))
    reply = connection.recv(64)
    if not reply.startswith(b"pid "):
        connection.close()
        raise RuntimeError(f"the MCP test zygote at {path} did not fork a server: {reply!r}")
    return Forked(connection, int(reply.split()[1]))


# ---------------------------------------------------------------- the zygote


def _serve_forever(listener: socket.socket) -> None:
    import mcp_test_server  # noqa: PLC0415 (the point of the zygote: once, before any fork)

    mcp_test_server.preload()
    # SIGCHLD and stdin EOF wake the one select() below; the zygote runs no thread, so a
    # fork copies nothing half-done.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    starters: dict[int, socket.socket] = {}  # child pid -> the connection that asked for it
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([listener, wake_r, sys.stdin.fileno()], [], [])
        if sys.stdin.fileno() in readable and not os.read(sys.stdin.fileno(), 4096):
            break  # the test process is gone
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
            _report_exits(starters)
        if listener in readable:
            connection, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(connection, _REQUEST_MAX, 3)
            if not message or len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                connection.close()
                continue
            pid = os.fork()
            if pid == 0:
                _become_server(connection, fds, json.loads(message), [listener, *starters.values()])
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):  # the starter gone already: its child follows
                connection.send(b"pid %d" % pid)
            starters[pid] = connection
    for pid in starters:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _report_exits(starters: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = starters.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.send(b"status %d" % status)
            connection.close()


def _become_server(
    connection: socket.socket,
    fds: list[int],
    request: dict[str, object],
    others: list[socket.socket],
) -> NoReturn:
    """In the forked child: take the starter's stdio, environment and directory; serve."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for other in others:
            other.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        argv = [str(arg) for arg in request["argv"]]  # type: ignore[attr-defined]
        environment = request["env"]
        assert isinstance(environment, dict)
        os.environ.clear()
        os.environ.update(environment)
        os.chdir(str(request["cwd"]))
        sys.argv = argv
        threading.Thread(target=_die_with_starter, args=(connection,), daemon=True).start()
        import mcp_test_server  # noqa: PLC0415 (imported by the zygote already)

        mcp_test_server.main(argv[1:])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # a server's crash is its exit status, as in its own process
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _die_with_starter(connection: socket.socket) -> None:
    # The starter never sends after its request: any return (or a reset) is its end.
    with contextlib.suppress(OSError):
        connection.recv(1)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: Sequence[str]) -> None:
    """SOCKET is the only entry of a directory made for it: both go when the zygote ends,
    also when the test process that started it was killed (stdin EOF all the same)."""
    (path,) = argv
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    try:
        listener.listen(64)
        _serve_forever(listener)
    finally:
        Path(path).unlink()
        Path(path).parent.rmdir()


if __name__ == "__main__":
    main(sys.argv[1:])
