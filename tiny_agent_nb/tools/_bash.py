"""The bash tool: one `bash -c` in the workspace, under the guard (`_guard.py`).

The command runs in a process group of its own, so that stopping it (on timeout, or when
the notebook is interrupted) reaches everything it started (`make` and its compilers,
`sleep 100 &`); on Linux the guard is a subreaper, so even what leaves the group (`setsid`)
is stopped, and it ends all of it when the kernel dies, even by SIGKILL. The kernel is
never in those groups, so the signals cannot hit it.

A command that exits may leave background jobs (a dev server started with `&`): they are
the user's, left running until the kernel dies. The tool stops reading shortly after bash
exits rather than waiting for them to close the output pipe; the guard says how bash
exited through a pipe of its own (`--report`).

The command gets the kernel's environment minus the API key (`child_environment`), and
the kernel's pid in TINY_AGENT_KERNEL_PID (its `$PPID` is the guard).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from .._guard import ADOPTS, SWEEP_S, guard_argv
from ..redaction import hidden_secrets
from ._base import BuiltinTool, ToolArguments, ToolContext, ToolOutput
from ._limits import CappedOutput
from ._paths import workspace_root

DEFAULT_TIMEOUT = 120.0
TERMINATE_GRACE = 2.0  # seconds between SIGTERM and SIGKILL for the command's group
EXIT_GRACE = 0.25  # seconds to keep reading after bash exits (background jobs hold the pipe)
_CHUNK = 65536
# Where the notebook finds the API key (TinyAgent.api_key): never passed on, whatever
# their value, so a key set there but configured differently stays hidden too.
KEY_VARIABLES = frozenset({"TINY_AGENT_API_KEY", "OPENROUTER_API_KEY"})

Ending = Literal["exited", "detached", "timeout"]


class BashArguments(ToolArguments):
    command: str = Field(description="Shell command(s), run with `bash -c` in the workspace root.")
    timeout: float = Field(
        DEFAULT_TIMEOUT,
        gt=0,
        allow_inf_nan=False,
        description="Seconds after which the command and everything it started are killed.",
    )


class Bash(BuiltinTool[BashArguments]):
    name = "bash"
    description = (
        "Run a bash command in the workspace root; stdin is empty. The result is stdout and "
        "stderr interleaved, then the exit code; long output keeps its beginning and end. "
        "Background jobs (cmd &) keep running after the command returns: redirect their "
        "output to a file."
    )
    Arguments = BashArguments
    # Off Linux the guard cannot adopt what leaves the command's group (`setsid`), nor
    # stay for the background jobs of a command that exited.
    may_outlive_kernel: ClassVar[bool] = not ADOPTS

    def execute(self, arguments: BashArguments, context: ToolContext) -> ToolOutput:
        _lingering[:] = [proc for proc in _lingering if proc.poll() is None]
        output = CappedOutput(context.output_limit)
        held = _InterruptHeld()
        report, report_w = os.pipe()  # how bash exited, from the guard
        try:
            executable, argv = guard_argv(
                "bash",
                ["-c", arguments.command],
                report=report_w,
                grace=TERMINATE_GRACE,
                # The death signal comes when the starting *thread* ends: only the main
                # thread lives as long as the kernel (a tool run elsewhere is watched
                # through the process alone).
                thread_bound=threading.current_thread() is threading.main_thread(),
            )
            with held:
                proc = subprocess.Popen(
                    [executable, *argv],
                    cwd=workspace_root(context),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={
                        **child_environment(os.environ, context.secrets),
                        # bash's parent is the guard: a command that means the kernel
                        # (the crash demo's `kill -9`) finds it here.
                        "TINY_AGENT_KERNEL_PID": str(os.getpid()),
                    },
                    pass_fds=(report_w,),
                )
        except BaseException:
            os.close(report)
            raise
        finally:
            os.close(report_w)
        assert proc.stdout is not None
        try:
            held.deliver()  # an interrupt that came while bash started: stopped below
            ending, code = _collect(proc, proc.stdout.fileno(), report, output, arguments.timeout)
            if ending == "timeout":
                stop_guard(proc)
                _drain(proc.stdout.fileno(), output)
        except BaseException:
            # The notebook's interrupt above all: no failure leaves the command unwatched.
            stop_guard(proc)
            raise
        finally:
            proc.stdout.close()
            os.close(report)
            _leave(proc)
        return _result(output.text(), ending, code, arguments.timeout)


class _InterruptHeld:
    """Ctrl-C (SIGINT, KeyboardInterrupt in the main thread) waits while bash starts: one
    landing inside Popen, once bash runs but before `proc` is ours, would leave the command
    running unwatched. `deliver()` raises it where the caller can stop the command; if
    Popen itself failed, leaving the block raises it. Elsewhere than on the main thread
    SIGINT never arrives as an exception, and nothing is held."""

    def __init__(self) -> None:
        self._previous: Any = None
        self._pending = False

    def _record(self, signum: int, frame: object) -> None:
        self._pending = True

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGINT)
        if previous is not None:  # None: a handler not set from Python, left alone
            self._previous = previous
            signal.signal(signal.SIGINT, self._record)

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        if kind is not None:
            self.deliver()

    def deliver(self) -> None:
        if self._pending:
            self._pending = False
            signal.raise_signal(signal.SIGINT)  # the kernel's own handler, as if it came now


def child_environment(environ: Mapping[str, str], secrets: Iterable[str]) -> dict[str, str]:
    """The kernel's environment without the API key: a command (`env`, `printenv`, a
    script that logs its settings) would otherwise print it into the session file."""
    hidden = hidden_secrets(secrets)
    return {
        name: value
        for name, value in environ.items()
        if name not in KEY_VARIABLES and not any(secret in value for secret in hidden)
    }


def _collect(
    proc: subprocess.Popen[bytes], fd: int, report: int, output: CappedOutput, timeout: float
) -> tuple[Ending, int | None]:
    """Read the command's output until it ends, its time is up, or bash has exited and
    only background jobs still hold the pipe; with bash's exit code once it exited."""
    deadline = time.monotonic() + timeout
    exited_at: float | None = None
    code: int | None = None
    said = b""
    reading = True
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        selector.register(report, selectors.EVENT_READ)
        while True:
            if exited_at is not None and not reading:
                return "exited", code
            wait = (deadline if exited_at is None else exited_at + EXIT_GRACE) - time.monotonic()
            if wait <= 0:
                # Before bash exits, its time is up (closing its output does not end it);
                # after, background jobs hold the pipe.
                return ("timeout", None) if exited_at is None else ("detached", code)
            for key, _ in selector.select(wait):
                if key.fd == report:
                    chunk = os.read(report, 64)
                    said += chunk
                    if not chunk:  # the guard has said all it will
                        selector.unregister(report)
                        try:
                            code = int(said)
                        except ValueError:  # the guard could not start bash (and said why)
                            code = proc.wait()
                        exited_at = time.monotonic()
                else:
                    chunk = os.read(fd, _CHUNK)
                    if chunk:
                        output.feed(chunk)
                    else:
                        selector.unregister(fd)
                        reading = False


def _drain(fd: int, output: CappedOutput) -> None:
    """Take what the killed command had written but we had not read yet."""
    os.set_blocking(fd, False)
    # Bounded: a process that escaped the group (its own setsid, off Linux) may still
    # be writing.
    deadline = time.monotonic() + EXIT_GRACE
    with contextlib.suppress(BlockingIOError):
        while time.monotonic() < deadline and (chunk := os.read(fd, _CHUNK)):
            output.feed(chunk)


def stop_guard(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the guard: it SIGTERMs the command's process group, SIGKILLs what is left
    after TERMINATE_GRACE and everything else the command started, and exits; reaped
    here. A second interrupt during the grace tells it to skip straight to SIGKILL."""
    proc.send_signal(signal.SIGTERM)  # nothing if it is already gone
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=TERMINATE_GRACE + SWEEP_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # a second stop signal: no more grace
            try:
                proc.wait(timeout=SWEEP_S)
            except subprocess.TimeoutExpired:
                # A guard that does not end (it never should): what it guards may now
                # outlive it, but the kernel does not hang on it.
                proc.kill()
                proc.wait()


# Guards that stay for the background jobs of commands that exited (Linux): reaped when
# they end, at a later call, so that none stays a zombie of the kernel.
_lingering: list[subprocess.Popen[bytes]] = []


def _leave(proc: subprocess.Popen[bytes]) -> None:
    """Reap the guard, which exits at once after bash unless background jobs remain."""
    try:
        proc.wait(timeout=EXIT_GRACE)
    except subprocess.TimeoutExpired:
        _lingering.append(proc)


def _result(text: str, ending: Ending, returncode: int | None, timeout: float) -> ToolOutput:
    body = text.removesuffix("\n") or "(no output)"  # the note goes on a line of its own
    if ending == "timeout":
        note = f"[timed out after {timeout:g} s; the command and its process group were killed]"
        return ToolOutput(f"{body}\n{note}", is_error=True)
    assert returncode is not None
    if returncode < 0:
        note = f"[killed by signal {_signal_name(-returncode)}]"
    else:
        note = f"[exit code {returncode}]"
    if ending == "detached":  # the exit code stays last: it is the line a failure shows
        note = "[background processes still running; their later output is not captured]\n" + note
    # A failing command is an error result, as the model would read a shell prompt: the
    # exit code is in the text either way.
    return ToolOutput(f"{body}\n{note}", is_error=returncode != 0)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # e.g. a real-time signal, which has no name
        return str(number)
