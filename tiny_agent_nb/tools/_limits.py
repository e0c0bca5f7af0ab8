"""Time limits for the reading tools, which must end even on hostile input.

read_file, list_files and grep are replayed after a crash while a notebook loads its
session (docs/spec.md §2.1), so a file, a tree or a pattern that made one of them run forever
would wedge every later kernel too. Each therefore works against a `Deadline` and, when
it passes, raises `ToolTimeoutError`, which `BuiltinTool.run` turns into a result with
`timed_out=True` (a replay that times out is recorded as interrupted, not replayed).

Most of the work checks the deadline between bounded steps (a chunk read, a directory
entry). One step cannot be bounded that way: a single `re` search, which backtracks and
holds the GIL with no way to stop it from another thread (`(a+)+$` on a long line of
`a`s then `b` takes longer than the universe has left). `run_in_child` runs such work in
a forked child that is killed when the deadline passes. Why a child rather than a
linear-time engine (google-re2): RE2 drops backreferences and lookaround, so grep's
documented "Python `re` syntax" would silently change meaning, and it would be a new
compiled dependency; a child keeps `re` exactly and also bounds whatever else the
search does. The child only reads files and writes one pipe, then `os._exit`s: it
touches no lock another thread of the kernel could have held at the fork.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
import warnings
from collections.abc import Callable

from ._base import ToolError

DEFAULT_TIME_LIMIT = 10.0  # seconds; each reading tool's description states it


class ToolTimeoutError(ToolError):
    """The tool stopped at its time limit; what it would have found is unknown."""


class Deadline:
    """A point in time (monotonic clock) after which the tool stops, and why it says so."""

    def __init__(
        self,
        seconds: float,
        advice: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds = seconds
        self._advice = advice
        self._clock = clock
        self._end = clock() + seconds

    def remaining(self) -> float:
        return self._end - self._clock()

    def check(self) -> None:
        if self.remaining() <= 0:
            raise self.expired()

    def expired(self) -> ToolTimeoutError:
        return ToolTimeoutError(
            f"stopped at its time limit of {self.seconds:g} s; nothing was changed and "
            f"the result is unknown. {self._advice}"
        )


def run_in_child(work: Callable[[], object], deadline: Deadline) -> object:
    """`work()`'s JSON-serialisable value, computed in a forked child that is killed
    (SIGKILL) when the deadline passes; then ToolTimeoutError. Ctrl-C in the parent
    kills the child too. A ToolError raised by `work` is raised here; `work` must
    translate anything else it expects (an OSError) itself."""
    deadline.check()
    read_end, write_end = os.pipe()
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns about forking a threaded process (a kernel always is);
            # the child below is written for exactly that case (see the module docstring).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError as exc:  # out of processes or memory
        os.close(read_end)
        os.close(write_end)
        raise ToolError(f"could not start the search process ({exc.strerror}); try again") from None
    if pid == 0:  # pragma: no cover - the child; its effect is checked through the pipe
        os.close(read_end)
        _child(work, write_end)
    os.close(write_end)
    try:
        data = _read_until(read_end, deadline)
    finally:
        os.close(read_end)
        # Reaped in every case; killing an already finished child is harmless.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if data is None:
        raise deadline.expired()
    try:
        answer = json.loads(data)
    except ValueError:
        raise ToolError("the search process ended without an answer; nothing was changed") from None
    if "timedOut" in answer:
        raise deadline.expired()
    if "error" in answer:
        raise ToolError(answer["error"])
    return answer["value"]


def _child(work: Callable[[], object], write_end: int) -> None:  # pragma: no cover
    code = 0
    try:
        try:
            answer: dict[str, object] = {"value": work()}
        except ToolTimeoutError:
            answer = {"timedOut": True}
        except ToolError as exc:
            answer = {"error": str(exc)}
        data = json.dumps(answer).encode("ascii")
        while data:
            data = data[os.write(write_end, data) :]
    except BaseException:
        code = 1
    # Never return into the caller's stack (it would run the kernel's code twice), never
    # run atexit handlers or flush buffers inherited from the parent.
    os._exit(code)


def _read_until(fd: int, deadline: Deadline) -> bytes | None:
    """Everything written to the pipe until EOF, or None if the deadline passes first."""
    chunks: list[bytes] = []
    while True:
        left = deadline.remaining()
        if left <= 0:
            return None
        # poll, not select: select cannot watch a descriptor numbered 1024 or more.
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(left * 1000):
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
