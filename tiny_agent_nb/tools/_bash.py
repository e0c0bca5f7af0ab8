"""The bash tool (replay policy `never`): one `bash -c` in the workspace.

The command runs in a session (and process group) of its own, so that stopping it —
on timeout, or when the notebook is interrupted — reaches everything it started
(`make` and its compilers, `sleep 100 &`), not just bash. The kernel itself is never in
that group, so the signals cannot hit it.

A command that exits normally may leave background jobs behind (a dev server started
with `&`): they are the user's to keep, and are left running. The tool stops reading
shortly after bash exits rather than waiting for them to close the output pipe.

The command gets the kernel's environment minus the API key (see `child_environment`).
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
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..redaction import hidden_secrets
from ..session import ReplayPolicy
from ._base import ToolArguments, ToolContext, ToolOutput
from ._builtin import BuiltinTool
from ._output import CappedOutput
from ._paths import workspace_root

DEFAULT_TIMEOUT = 120.0
TERMINATE_GRACE = 2.0  # seconds between SIGTERM and SIGKILL for the command's group
EXIT_GRACE = 0.25  # seconds to keep reading after bash exits (background jobs hold the pipe)
_POLL = 0.05  # how often to look whether bash exited while its pipe stays open
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
    replay_policy: ClassVar[ReplayPolicy] = "never"
    Arguments = BashArguments

    def execute(self, arguments: BashArguments, context: ToolContext) -> ToolOutput:
        output = CappedOutput(context.output_limit)
        held = _InterruptHeld()
        with held:
            proc = subprocess.Popen(
                ["bash", "-c", arguments.command],
                cwd=workspace_root(context),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=child_environment(os.environ, context.secrets),
            )
        assert proc.stdout is not None
        try:
            held.deliver()  # an interrupt that came while bash started: stopped below
            ending = _collect(proc, proc.stdout.fileno(), output, arguments.timeout)
            if ending == "timeout":
                stop_group(proc)
                _drain(proc.stdout.fileno(), output)
        except BaseException:
            # KeyboardInterrupt (the notebook's interrupt) above all, but any failure
            # here must not leave the command running unwatched.
            stop_group(proc)
            raise
        finally:
            proc.stdout.close()
        return _result(output.text(), ending, proc.returncode, arguments.timeout)


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
    proc: subprocess.Popen[bytes], fd: int, output: CappedOutput, timeout: float
) -> Ending:
    """Read the command's output until it ends, its time is up, or bash has exited and
    only background jobs still hold the pipe."""
    deadline = time.monotonic() + timeout
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None:
                wait = exited_at + EXIT_GRACE - now
                if wait <= 0:
                    return "detached"  # bash is done; background jobs still hold the pipe
            else:
                if now >= deadline:
                    return "timeout"
                # Woken at least every _POLL: bash exiting does not close the pipe while
                # its background jobs hold it, so EOF alone cannot tell us.
                wait = min(deadline - now, _POLL)
            if selector.select(wait):
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    break
                output.feed(chunk)
    # End of output, yet bash may still run (it can close its stdout and go on).
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        return "timeout"
    return "exited"


def _drain(fd: int, output: CappedOutput) -> None:
    """Take what the killed command had written but we had not read yet."""
    os.set_blocking(fd, False)
    # Bounded: a process that escaped the group (its own setsid) may still be writing.
    deadline = time.monotonic() + EXIT_GRACE
    with contextlib.suppress(BlockingIOError):
        while time.monotonic() < deadline and (chunk := os.read(fd, _CHUNK)):
            output.feed(chunk)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the command's process group, SIGKILL what is left after a grace period,
    and reap bash. A second interrupt during the grace period skips straight to SIGKILL."""
    pgid = proc.pid  # start_new_session: bash leads its own group
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + TERMINATE_GRACE
    try:
        while time.monotonic() < deadline and _group_alive(pgid, proc):
            time.sleep(0.01)
    finally:
        _signal_group(pgid, signal.SIGKILL)
        proc.wait()  # reaped here, so no zombie of ours outlives the call


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is already gone
        os.killpg(pgid, sig)


def _group_alive(pgid: int, proc: subprocess.Popen[bytes]) -> bool:
    proc.poll()  # reap bash as soon as it dies: a zombie still counts as a group member
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # Orphaned members that died are zombies until init reaps them (some container
    # inits never do); only a member that still runs is worth waiting for.
    proc_fs = Path("/proc")
    if not proc_fs.is_dir():
        return True
    for entry in proc_fs.iterdir():
        if entry.name.isdigit() and _live_member(entry / "stat", pgid):
            return True
    return False


def _live_member(stat: Path, pgid: int) -> bool:
    try:
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
    except (OSError, ValueError):
        return False  # the process vanished while we looked
    return int(pgrp) == pgid and state not in ("Z", "X")


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
