"""The guard: what a kernel starts (a stdio MCP server, a `bash` command, what `python`
code starts) dies with that kernel, however the kernel dies.

When a kernel is SIGKILLed (or OOM-killed) nothing in it runs any more, so the end of its
children has to be arranged by another process: this one, run by path (`guard_argv`):

    sys.executable -I -S .../_guard.py KERNEL_PID [OPTION...] -- COMMAND ARGS...

The guard starts the command in a process group of its own, so that it can end the
command with everything the command started (`npx` starts node, `make` its compilers),
and, on Linux, makes itself a child subreaper (PR_SET_CHILD_SUBREAPER): a process that
leaves the group (`setsid`, a daemon's double fork) is still the guard's descendant, and
is handed to the guard, not to init, when its own parent dies. The guard ends the group
when

- the kernel dies: on Linux the kernel sends the guard SIGTERM (PR_SET_PDEATHSIG); on
  every platform the guard also looks at `os.getppid()` every WATCH_INTERVAL_S, the
  fallback;
- the guard gets SIGTERM, SIGINT or SIGHUP (the MCP SDK's shutdown, the bash tool's
  timeout or interrupt send SIGTERM): SIGTERM to the group, up to the grace (GRACE_S,
  or `--grace`; a second stop signal cuts it short) for the command to exit, then SIGKILL
  to the group;
- the command exits by itself (an MCP server): SIGKILL to whatever it left in its group;

and then, on Linux, SIGKILLs every process still below it (what left the group) until
none is left. It exits with the command's exit code (128+N for one killed by signal N).

`--report FD` (the bash tool): when the command exits by itself, the guard writes its
exit code (negative for a signal, as `Popen.returncode`) and a newline to FD and closes
it, and does *not* end the group: what the command started in the background runs on,
and on Linux the guard stays (adopting it) until all of it has ended, or ends it when the
kernel dies. `--watch-only`: no PR_SET_PDEATHSIG, for a guard started from a thread that
may end before the kernel (the signal comes when the starting *thread* ends).

`_guard.py KERNEL_PID --sweep NAME=VALUE` (the python tool, Linux): runs no command;
when the kernel dies it ends every process whose environment holds NAME=VALUE (what the
kernel set while `python` code ran, so what that code started), SIGTERM then SIGKILL.

The command inherits stdin, stdout, stderr, the environment and the working directory;
once it runs, the guard lets go of its own stdin and stdout (with `--report`, stderr
too), so that closing the pipes works as if the guard were not there. A command that
cannot be started is one line on stderr and exit status 127 (as in a shell).

Stdlib only, and nothing from tiny_agent_nb: the guard is run by path (`-S`: without
`site`, whose .pth files cost tens of milliseconds) and sits in front of every server
start and every bash command, so it must start in a few milliseconds.
"""

from __future__ import annotations

# The C module under `signal`, which imports `enum` and wraps every number in one: the
# guard's start is on the path of every bash command, so it imports little (neither
# `contextlib`, `threading` nor `collections.abc` either).
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
"""How long a server has to exit after SIGTERM before its group is SIGKILLed. Shorter than
the SDK's own grace (mcp.client.stdio.FORCE_KILL_TIMEOUT, 2 s), which it gives the guard
after its SIGTERM: the guard must have SIGKILLed the server's group before the SDK SIGKILLs
the guard, or a server that ignores SIGTERM would outlive both."""

WATCH_INTERVAL_S = 0.5
"""How often the guard compares os.getppid() with the kernel's pid, the fallback."""

SWEEP_S = 10.0
"""How long the guard goes on ending what is left before it gives up: a process stuck in
the kernel (uninterruptible sleep) dies only when its I/O returns."""

ADOPTS = sys.platform.startswith("linux") and os.path.isdir("/proc")
"""Whether the guard ends everything a command started, whatever left its group: Linux,
with PR_SET_CHILD_SUBREAPER and /proc to find descendants. Elsewhere a process that
leaves the group (its own `setsid`) may outlive the kernel."""

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
    this process; `report`, `grace` and `thread_bound=False` are the options above.

    On Linux the guard's "parent" for PR_SET_PDEATHSIG is the *thread* that started it:
    start guarded servers from a thread that lives as long as they do (the MCP package
    starts them from its event-loop thread, which ends only after they are stopped), or
    pass `thread_bound=False`. The getppid() watch cannot stand in for it there: it sees
    the process, not the thread.
    """
    if os.name != "posix":
        # Windows: the SDK runs the server in a Job Object that is killed when the kernel's
        # handle on it closes, which the OS does when the kernel dies.
        return command, list(args)
    options = []
    if report is not None:
        options += ["--report", str(report)]
    if grace is not None:
        options += ["--grace", repr(float(grace))]
    if not thread_bound:
        options.append("--watch-only")
    # __file__ is absolute for an imported module, so the server's cwd does not matter.
    return sys.executable, ["-I", "-S", __file__, str(os.getpid()), *options, "--", command, *args]


def sweep_argv(marker: str, *, thread_bound: bool = True) -> list[str]:
    """The command line of a guard that, once this process dies, ends every process whose
    environment holds `marker` (`NAME=VALUE`). Linux only (ADOPTS)."""
    watch = [] if thread_bound else ["--watch-only"]
    return [sys.executable, "-I", "-S", __file__, str(os.getpid()), *watch, "--sweep", marker]


class _Guard:
    def __init__(self, parent: int, grace: float) -> None:
        self._parent = parent
        self._grace = grace
        self.stop_requested = False
        self.hurry = False  # a second stop signal: no more grace
        self._status: int | None = None  # the command's wait status, once reaped
        # One pipe wakes the guard for everything it waits for: a stop signal or SIGCHLD
        # (through set_wakeup_fd). A pipe, not a flag checked around a blocking wait: a
        # byte written before select() starts is still there when it does.
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
        WATCH_INTERVAL_S, a look at the parent: where the death signal does not exist, or
        cannot arrive (a SIGTERM the guard inherited as blocked), this is how the guard
        learns that the kernel died."""
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
            # A bash command that ended by itself: say how now. What it started in the
            # background is the user's to keep, but not past the kernel.
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
            _signal_group(command, SIGTERM)
            deadline = time.monotonic() + self._grace
            while (
                not self._has_exited(command)
                and not self.hurry
                and (left := deadline - time.monotonic()) > 0
            ):
                self.wait(left)
        # The command is dead but not reaped yet (_has_exited leaves it a zombie), so its
        # pid still names its group here: it cannot have been reused for another process.
        _signal_group(command, SIGKILL)
        return self._reap(command)

    def _end_descendants(self, *, polite: bool) -> None:
        """SIGKILL every process below the guard (it adopted, as a subreaper, whatever
        left the command's group and outlived its parent: a `setsid` grandchild), reaping
        each that is its child, until it has no child left. `polite`: SIGTERM first, and
        the grace to exit (what a command left in the background, when the kernel dies)."""
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


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # ESRCH: the whole group is gone. EPERM: macOS, a group of zombies only.


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # gone meanwhile


def _processes() -> list[tuple[int, bytes, int]]:
    """(pid, state, parent pid) of every process /proc lists."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                    state, ppid = stat.read().rsplit(b")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue  # gone meanwhile
            found.append((int(entry), state, int(ppid)))
    return found


def _descendants(root: int) -> list[int]:
    """The live processes below `root` (a zombie has no children, and is reaped by its
    parent, or by the guard once its parent is killed)."""
    children: dict[int, list[int]] = {}
    for pid, state, ppid in _processes():
        if state not in (b"Z", b"X"):
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
    for pid, state, _ in _processes():
        if state in (b"Z", b"X") or pid == os.getpid():
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
    """Close the guard's copies of stdin and stdout (reopened on /dev/null): the command
    holds the pipes now, and a copy here would keep the client's EOF from reaching the
    command and the command's EOF from reaching the client (with `stderr`: the bash tool
    reads the command's stdout and stderr from one pipe)."""
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
        # posix_spawnp rather than subprocess.Popen: importing subprocess costs a third of
        # the guard's start. The same child: a group of its own (all that killpg needs),
        # PATH looked up as a shell does, stdin/stdout/stderr, environment and cwd
        # inherited (the guard's other descriptors are close-on-exec), and the signals
        # Python ignores (SIGPIPE, SIGXFSZ) back to their defaults, as Popen does.
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
