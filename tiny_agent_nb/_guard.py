"""The guard: what a kernel starts (a stdio MCP server, a `bash` command, what `python`
code starts) dies with that kernel, however the kernel dies. A SIGKILLed kernel runs
nothing more, so another process must end its children: this one, run by path
(`guard_argv`):

    sys.executable -I -S .../_guard.py KERNEL_PID [OPTION...] -- COMMAND ARGS...

The command runs in a process group of its own (`npx` starts node); on Linux the guard is
a child subreaper, so what leaves the group (`setsid`, a double fork) is handed to it,
not to init. The group ends when the kernel dies (PR_SET_PDEATHSIG, and everywhere a
look at `os.getppid()`), on SIGTERM, SIGINT or SIGHUP (SIGTERM, a grace, then SIGKILL),
or when the command exits by itself; then, on Linux, every process still below the guard
is killed. Its exit code is the command's (128+N for signal N); a command that cannot
start is one line on stderr and 127, as in a shell.

`--report FD` (bash): the command's own exit code goes to FD, and what it started in the
background runs on until the kernel dies. `--watch-only`: no PR_SET_PDEATHSIG (the
signal follows the starting *thread*, which may end first). `--sweep NAME=VALUE`
(python, Linux): no command; when the kernel dies, end every process whose environment
holds NAME=VALUE.

Stdlib only and run with `-S`: it sits in front of every server start and bash command,
so it must start in a few milliseconds.
"""

from __future__ import annotations

# The C module under `signal`, which imports `enum`: the guard's start is on the path of
# every bash command, so it imports little (nor `contextlib`, `threading`, `subprocess`).
import _signal  # type: ignore[import-not-found]
import os
import select
import sys
import time

SIGTERM: int = _signal.SIGTERM
SIGKILL: int = _signal.SIGKILL
_STOP_SIGNALS: tuple[int, ...] = (SIGTERM, _signal.SIGINT, _signal.SIGHUP)
_DEFAULTS_RESTORED: tuple[int, ...] = (_signal.SIGPIPE, _signal.SIGXFSZ)

GRACE_S = 1.5
"""Shorter than the MCP SDK's own grace (mcp.client.stdio.FORCE_KILL_TIMEOUT, 2 s): the
guard must SIGKILL the server's group before the SDK SIGKILLs the guard, or a server that
ignores SIGTERM would outlive both."""

WATCH_INTERVAL_S = 0.5  # how often the guard compares os.getppid() with the kernel's pid

SWEEP_S = 10.0
"""How long the guard goes on ending what is left: a process in uninterruptible sleep dies
only when its I/O returns."""

ADOPTS = sys.platform.startswith("linux") and os.path.isdir("/proc")
"""Whether the guard ends also what left the command's group (Linux: a subreaper, and /proc
to find descendants). Elsewhere a process that calls `setsid` may outlive the kernel."""

CANNOT_START = 127  # what a shell returns for a command it cannot run
_USAGE = 2
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PR_SET_CHILD_SUBREAPER = 36


def guard_argv(
    command: str,
    args: list[str] | tuple[str, ...],
    *,
    report: int | None = None,
    grace: float | None = None,
    thread_bound: bool = True,
) -> tuple[str, list[str]]:
    """(command, args) that run `command args` under the guard, watched for the death of
    this process. `thread_bound=False`: `--watch-only`, for a starting thread that may end
    before the command (the MCP package's event-loop thread lives as long)."""
    if os.name != "posix":
        # Windows: the SDK runs the server in a Job Object that is killed when the kernel's
        # handle on it closes, which the OS does when the kernel dies.
        return command, list(args)
    options = [] if report is None else ["--report", str(report)]
    if grace is not None:
        options += ["--grace", repr(float(grace))]
    return sys.executable, [*_guard_args(thread_bound), *options, "--", command, *args]


def sweep_argv(marker: str, *, thread_bound: bool = True) -> list[str]:
    """The command line of a guard that, once this process dies, ends every process whose
    environment holds `marker` (`NAME=VALUE`). Linux only (ADOPTS)."""
    return [sys.executable, *_guard_args(thread_bound), "--sweep", marker]


def _guard_args(thread_bound: bool) -> list[str]:
    # __file__ is absolute for an imported module, so the command's cwd does not matter.
    watch = [] if thread_bound else ["--watch-only"]
    return ["-I", "-S", __file__, str(os.getpid()), *watch]


class _Guard:
    def __init__(self, parent: int, grace: float) -> None:
        self._parent = parent
        self._grace = grace
        self.stop_requested = False
        self.hurry = False  # a second stop signal: no more grace
        self._status: int | None = None  # the command's wait status, once reaped
        # One pipe wakes the guard for a stop signal or SIGCHLD (set_wakeup_fd): unlike a
        # flag checked around a blocking wait, a byte written before select() stays.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        _signal.set_wakeup_fd(self._wake_w)
        for sig in _STOP_SIGNALS:
            _signal.signal(sig, self._on_stop_signal)
        # A handler (not SIG_DFL) so that SIGCHLD reaches the wakeup fd; exec resets
        # handled signals to their defaults, so the command does not inherit it.
        _signal.signal(_signal.SIGCHLD, lambda _signum, _frame: None)

    def _on_stop_signal(self, _signum: int, _frame: object) -> None:
        self.hurry = self.stop_requested
        self.stop_requested = True

    def parent_is_alive(self) -> bool:
        # Once the kernel is gone the guard has been handed to init (or a subreaper).
        return os.getppid() == self._parent

    def wait(self, timeout: float | None) -> None:
        """Until something wrote to the wake pipe, or `timeout` seconds; and at least every
        WATCH_INTERVAL_S a look at the parent, for where the death signal does not exist or
        cannot arrive (a SIGTERM the guard inherited as blocked)."""
        limit = WATCH_INTERVAL_S if timeout is None else min(timeout, WATCH_INTERVAL_S)
        select.select([self._wake_r], [], [], limit)
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass  # woken by the time limit
        if not self.parent_is_alive():
            self.stop_requested = True

    def run(self, command: int, report: int | None) -> int:
        """Watch `command` (the pid of its group's leader) until it exits or the guard is
        told to stop; end what must end; the command's exit code (negative: a signal)."""
        while not self.stop_requested and not self._has_exited(command):
            self.wait(None)
        if report is not None and not self.stop_requested:
            # A bash command that ended by itself: what it started in the background is the
            # user's to keep, but not past the kernel.
            code = self._reap(command)
            _report(report, code)
            if ADOPTS:
                while not self.stop_requested and self._has_children():
                    self.wait(None)
                if self.stop_requested:
                    self._end_descendants(polite=True)
            return code
        code = self._end_group(command)
        if report is not None:
            _report(report, code)
        if ADOPTS:
            self._end_descendants(polite=False)
        return code

    def sweep(self, marker: bytes) -> None:
        """Wait for the kernel's death (or a stop signal), then end the marked processes."""
        while not self.stop_requested:
            self.wait(None)
        _signal_all(_marked(marker), SIGTERM)
        deadline = time.monotonic() + self._grace
        while not self.hurry and _marked(marker) and time.monotonic() < deadline:
            self.wait(0.05)  # not our children: no SIGCHLD tells us they died
        deadline = time.monotonic() + SWEEP_S
        while (left := _marked(marker)) and time.monotonic() < deadline:
            _signal_all(left, SIGKILL)
            self.wait(0.02)

    def _end_group(self, command: int) -> int:
        if not self._has_exited(command):
            _signal_all([-command], SIGTERM)  # a negative pid: the whole group
            deadline = time.monotonic() + self._grace
            while (
                not self._has_exited(command)
                and not self.hurry
                and (left := deadline - time.monotonic()) > 0
            ):
                self.wait(left)
        # The command is dead but not reaped yet (_has_exited leaves it a zombie), so its
        # pid still names its group here: it cannot have been reused for another process.
        _signal_all([-command], SIGKILL)
        return self._reap(command)

    def _end_descendants(self, *, polite: bool) -> None:
        """SIGKILL every process below the guard (a subreaper adopts a `setsid` grandchild
        whose parent died) until it has no child left. `polite`: SIGTERM first, and the
        grace to exit (what a command left in the background, when the kernel dies)."""
        if polite:
            _signal_all(_descendants(os.getpid()), SIGTERM)
            deadline = time.monotonic() + self._grace
            while not self.hurry and self._has_children() and time.monotonic() < deadline:
                self.wait(0.05)  # a grandchild's death wakes nobody
        deadline = time.monotonic() + SWEEP_S
        while True:
            # Scanned again each round: a process forked while we killed its parent is
            # handed to us, and killed in the next one.
            _signal_all(_descendants(os.getpid()), SIGKILL)
            if not self._has_children() or time.monotonic() >= deadline:
                return
            self.wait(0.02)

    def _has_children(self) -> bool:
        """Reap every child that has exited; whether any is left."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True

    def _reap(self, pid: int) -> int:
        if self._status is None:
            _, self._status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(self._status)

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


def _report(fd: int, code: int) -> None:
    try:
        os.write(fd, b"%d\n" % code)
    except OSError:
        pass  # the kernel is gone: nobody to tell
    os.close(fd)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # gone meanwhile (EPERM: on macOS, a group of zombies only)


def _processes() -> list[tuple[int, int]]:
    """(pid, parent pid) of every live process /proc lists (a zombie has no children and
    is reaped by its parent, or by the guard once its parent is killed)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                    state, ppid = stat.read().rsplit(b")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue  # gone meanwhile
            if state not in (b"Z", b"X"):
                found.append((int(entry), int(ppid)))
    return found


def _descendants(root: int) -> list[int]:
    """The live processes below `root`."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _processes():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    todo = [root]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _marked(marker: bytes) -> list[int]:
    """The live processes of this user whose environment holds `marker` exactly."""
    found = []
    for pid, _ in _processes():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if marker in environ.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue  # gone, or not ours to read
    return found


def _prctl(*requests: tuple[int, int]) -> None:
    """Linux's prctl, through ctypes (only there: importing it costs milliseconds)."""
    if not sys.platform.startswith("linux") or not requests:
        return
    import ctypes  # noqa: PLC0415

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        for option, value in requests:
            libc.prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no libc: the watch of getppid() remains


def _let_go_of_stdio(*, stderr: bool) -> None:
    """Reopen the guard's stdin and stdout (with `stderr`, that too: the bash tool reads
    both from one pipe) on /dev/null: a copy of the command's pipes here would keep each
    side's EOF from reaching the other."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2) if stderr else (0, 1):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def _say(line: str) -> None:
    # stderr only: stdout is the protocol's channel.
    print(line, file=sys.stderr, flush=True)


def _options(argv: list[str]) -> tuple[dict[str, str], list[str]] | None:
    """`--name value` and `--flag` options up to `--`, and what follows it; None: bad."""
    options: dict[str, str] = {}
    rest = list(argv)
    while rest and rest[0] != "--":
        name = rest.pop(0)
        if name == "--watch-only":
            options[name] = ""
        elif name in ("--report", "--grace", "--sweep") and rest:
            options[name] = rest.pop(0)
        else:
            return None
    return options, rest[1:]


def main(argv: list[str]) -> int:
    parsed = _options(argv[1:]) if argv and argv[0].isdigit() else None
    usage = "usage: _guard.py PARENT_PID [OPTION...] -- COMMAND [ARG...]"
    if parsed is None or not (parsed[1] or "--sweep" in parsed[0]):
        _say(usage)
        return _USAGE
    (options, command_line), parent = parsed, int(argv[0])
    try:
        grace = float(options.get("--grace", GRACE_S))
        report = int(options["--report"]) if "--report" in options else None
    except ValueError:
        _say(usage)
        return _USAGE
    guard = _Guard(parent, grace)
    _prctl(
        *([] if "--watch-only" in options else [(_PR_SET_PDEATHSIG, SIGTERM)]),
        *([(_PR_SET_CHILD_SUBREAPER, 1)] if ADOPTS else []),
    )
    # Checked after prctl: a parent that died before it would never send the signal.
    if not guard.parent_is_alive() or guard.stop_requested:
        if "--sweep" in options:
            guard.stop_requested = True  # already gone: end what it left at once
        else:
            _say(f"not starting {command_line[0]}: the process that asked for it is gone")
            return 128 + SIGTERM
    if "--sweep" in options:
        _let_go_of_stdio(stderr=True)
        guard.sweep(options["--sweep"].encode())
        return 0
    if report is not None:
        os.set_inheritable(report, False)  # for the guard alone: EOF when it exits
    command, args = command_line[0], command_line[1:]
    try:
        # posix_spawnp, not subprocess.Popen (whose import costs a third of the guard's
        # start), with what Popen would do: PATH looked up, the signals Python ignores
        # (SIGPIPE, SIGXFSZ) back to their defaults; and a group of its own.
        child = os.posix_spawnp(
            command,
            [command, *args],
            os.environ,
            setpgroup=0,
            setsigdef=_DEFAULTS_RESTORED,
        )
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in an argument
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _say(f"cannot start {command}: {reason}")
        return CANNOT_START
    _let_go_of_stdio(stderr=report is not None)
    code = guard.run(child, report)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
