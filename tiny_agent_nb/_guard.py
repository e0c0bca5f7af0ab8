"""The guard: runs a stdio MCP server so that it dies with the kernel that started it.

A stdio server is a child of the kernel. When the kernel is SIGKILLed (or OOM-killed)
nothing in the kernel runs any more, so the server's end has to be arranged by another
process: this one. The MCP package starts

    sys.executable -I -S .../_guard.py KERNEL_PID -- COMMAND ARGS...

(`guard_argv`) instead of `COMMAND ARGS...`. The guard starts the server in a process
group of its own, so that it can end the server with everything the server started
(`npx` starts node, `uvx` starts python), and ends that group when

- the kernel dies: on Linux the kernel sends the guard SIGTERM (PR_SET_PDEATHSIG); on
  every platform a thread also watches `os.getppid()`, the fallback;
- the guard gets SIGTERM, SIGINT or SIGHUP (the SDK's shutdown sends SIGTERM): SIGTERM to
  the group, up to GRACE_S for the server to exit, then SIGKILL to the group;
- the server exits by itself: SIGKILL to whatever it left in its group, and the guard
  exits with the server's exit code (128+N for a server killed by signal N).

The server inherits stdin, stdout, stderr, the environment and the working directory;
once it runs, the guard lets go of its own stdin and stdout, so that closing the pipes
works as if the guard were not there. A command that cannot be started is one line on
stderr and exit status 127 (as in a shell).

Stdlib only, and nothing from tiny_agent_nb: the guard is run by path (`-S`: without
`site`, whose .pth files cost tens of milliseconds) and sits in front of every server
start, so it must start in a few milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Sequence

GRACE_S = 1.5
"""How long a server has to exit after SIGTERM before its group is SIGKILLed. Shorter than
the SDK's own grace (mcp.client.stdio.FORCE_KILL_TIMEOUT, 2 s), which it gives the guard
after its SIGTERM: the guard must have SIGKILLed the server's group before the SDK SIGKILLs
the guard, or a server that ignores SIGTERM would outlive both."""

WATCH_INTERVAL_S = 0.5
"""How often the fallback thread compares os.getppid() with the kernel's pid."""

CANNOT_START = 127  # what a shell returns for a command it cannot run
_USAGE = 2
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def guard_argv(command: str, args: Sequence[str]) -> tuple[str, list[str]]:
    """(command, args) that run `command args` under the guard, watched for the death of
    this process.

    On Linux the guard's "parent" for PR_SET_PDEATHSIG is the *thread* that started it:
    start guarded servers from a thread that lives as long as they do (the MCP package
    starts them from its event-loop thread, which ends only after they are stopped). The
    getppid() watch cannot stand in for it there: it sees the process, not the thread.
    """
    if os.name != "posix":
        # Windows: the SDK runs the server in a Job Object that is killed when the kernel's
        # handle on it closes, which the OS does when the kernel dies.
        return command, list(args)
    # __file__ is absolute for an imported module, so the server's cwd does not matter.
    return sys.executable, ["-I", "-S", __file__, str(os.getpid()), "--", command, *args]


class _Guard:
    def __init__(self, parent: int) -> None:
        self._parent = parent
        self.stop_requested = False
        self._status: int | None = None  # the server's wait status, once reaped
        # One pipe wakes the main thread for everything it waits for: a stop signal or
        # SIGCHLD (through signal.set_wakeup_fd), or the watch thread. A pipe, not a
        # flag checked around a blocking wait: a byte written before select() starts is
        # still there when it does.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w)
        for sig in _STOP_SIGNALS:
            signal.signal(sig, self._on_stop_signal)
        # A handler (not SIG_DFL) so that SIGCHLD reaches the wakeup fd; exec resets
        # handled signals to their defaults, so the server does not inherit it.
        signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)

    def _on_stop_signal(self, _signum: int, _frame: object) -> None:
        self.stop_requested = True

    def parent_is_alive(self) -> bool:
        # Once the kernel is gone the guard has been handed to init (or a subreaper).
        return os.getppid() == self._parent

    def watch_parent(self) -> None:
        while self.parent_is_alive():
            time.sleep(WATCH_INTERVAL_S)
        self.stop_requested = True
        # Written here, not by signalling ourselves: a SIGTERM the guard inherited as
        # blocked would never arrive, and this is the path for when signals fail.
        with contextlib.suppress(BlockingIOError):  # full: the main thread is awake anyway
            os.write(self._wake_w, b"\0")

    def wait(self, timeout: float | None) -> None:
        """Until something wrote to the wake pipe, or `timeout` seconds."""
        select.select([self._wake_r], [], [], timeout)
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_r, 4096)

    def run(self, server: int) -> int:
        """Watch `server` (the pid of its group's leader) until it exits or the guard is told
        to stop; end its group; its exit status."""
        while not self.stop_requested and not self._has_exited(server):
            self.wait(None)
        if not self._has_exited(server):
            _signal_group(server, signal.SIGTERM)
            deadline = time.monotonic() + GRACE_S
            while not self._has_exited(server) and (left := deadline - time.monotonic()) > 0:
                self.wait(left)
        # The server is dead but not reaped yet (_has_exited leaves it a zombie), so its
        # pid still names its group here: it cannot have been reused for another process.
        _signal_group(server, signal.SIGKILL)
        if self._status is None:
            _, self._status = os.waitpid(server, 0)
        code = os.waitstatus_to_exitcode(self._status)
        return code if code >= 0 else 128 - code

    def _has_exited(self, pid: int) -> bool:
        """Whether the child `pid` has exited, leaving it unreaped (a zombie) where
        os.waitid exists."""
        if self._status is not None:
            return True
        if hasattr(os, "waitid"):
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            return os.waitid(os.P_PID, pid, flags) is not None
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped:
            self._status = status
        return self._status is not None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    # ESRCH: the whole group is gone. EPERM: macOS, for a group left with zombies only.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _set_parent_death_signal() -> None:
    """Ask Linux to send SIGTERM when the thread that started the guard ends."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # noqa: PLC0415  (only where prctl exists: it costs milliseconds)

    with contextlib.suppress(OSError, AttributeError):  # no libc: the watch thread remains
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _let_go_of_stdio() -> None:
    """Close the guard's copies of stdin and stdout (reopened on /dev/null): the server
    holds the pipes now, and a copy here would keep the client's EOF from reaching the
    server and the server's EOF from reaching the client."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    if null > 1:
        os.close(null)


def _say(line: str) -> None:
    # stderr only: stdout is the protocol's channel.
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str]) -> int:
    if len(argv) < 3 or not argv[0].isdigit() or argv[1] != "--":
        _say("usage: _guard.py PARENT_PID -- COMMAND [ARG...]")
        return _USAGE
    parent, command, args = int(argv[0]), argv[2], argv[3:]
    guard = _Guard(parent)
    _set_parent_death_signal()
    # Checked after prctl: a parent that died before it would never send the signal.
    if not guard.parent_is_alive() or guard.stop_requested:
        _say(f"not starting {command}: the process that asked for it is gone")
        return 128 + signal.SIGTERM
    threading.Thread(target=guard.watch_parent, name="watch-parent", daemon=True).start()
    try:
        # posix_spawnp rather than subprocess.Popen: importing subprocess costs a third of
        # the guard's start. The same child: a group of its own (all that killpg needs),
        # PATH looked up as a shell does, stdin/stdout/stderr, environment and cwd
        # inherited (the guard's other descriptors are close-on-exec), and the signals
        # Python ignores (SIGPIPE, SIGXFSZ) back to their defaults, as Popen does.
        server = os.posix_spawnp(
            command,
            [command, *args],
            os.environ,
            setpgroup=0,
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in an argument
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _say(f"cannot start {command}: {reason}")
        return CANNOT_START
    _let_go_of_stdio()
    return guard.run(server)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
