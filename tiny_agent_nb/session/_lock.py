"""Single writer per session file (docs/session-format.md §6.4).

Two layers: a registry refuses a second writer in this process before the OS is asked,
and `flock` refuses writers in other processes. flock (not POSIX `lockf`) because a POSIX
lock is dropped when *any* descriptor of the file is closed by the process, which a
read-only `load_session()` of the same file would do. The kernel releases a flock when its
holder dies, so a lock left by a `kill -9`ed kernel is free again at once.

Inside the one writer, `FifoLock` serves its commits in the order they arrived, and
`sigint_deferred` keeps a notebook interrupt from landing inside one: Jupyter's
"interrupt kernel" raises KeyboardInterrupt at any bytecode of the main thread, which
could fall between the write and the in-memory merge, or inside the FIFO lock's
bookkeeping (leaving every later commit waiting forever).
"""

from __future__ import annotations

import fcntl
import os
import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from ._exceptions import SessionLockedError

_registry_lock = threading.Lock()
_registry: set[str] = set()


def claim_in_process(key: str, path: str | Path) -> None:
    with _registry_lock:
        if key in _registry:
            raise SessionLockedError(path, os.getpid(), in_process=True)
        _registry.add(key)


def release_in_process(key: str) -> None:
    with _registry_lock:
        _registry.discard(key)


def lock_exclusive(fd: int, path: str | Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SessionLockedError(path, flock_holder(fd), in_process=False) from None


def flock_holder(fd: int) -> int | None:
    """The pid holding a flock on fd's file, read from /proc/locks (Linux); else None."""
    st = os.fstat(fd)
    wanted = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.replace("->", " ").split()
        # "<n>: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<inode> <start> <end>"
        if len(fields) < 6 or fields[1] != "FLOCK" or "->" in line:
            continue
        try:
            major, minor, inode = fields[5].split(":")
            where = (int(major, 16), int(minor, 16), int(inode))
            pid = int(fields[4])
        except ValueError:
            continue
        if where == wanted:
            return pid
    return None


class FifoLock:
    """Commits are served in the order they arrived (a plain Lock makes no such promise)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._next_ticket = 0
        self._serving = 0
        self._abandoned: set[int] = set()
        self.owner: int | None = None

    def __enter__(self) -> None:
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket = ticket + 1
            try:
                while ticket != self._serving:
                    self._cond.wait()
            except BaseException:
                # Leaving the queue (an exception while waiting): give the ticket back,
                # or every later commit would wait for it forever.
                self._abandoned.add(ticket)
                self._advance()
                raise
            self.owner = threading.get_ident()

    def __exit__(self, *exc_info: object) -> None:
        with self._cond:
            self.owner = None
            self._serving += 1
            self._advance()

    def _advance(self) -> None:
        while self._serving in self._abandoned:
            self._abandoned.discard(self._serving)
            self._serving += 1
        self._cond.notify_all()


class sigint_deferred:
    """Hold SIGINT back on the main thread; deliver it to the previous handler on exit."""

    def __init__(self) -> None:
        self._active = threading.get_ident() == _MAIN_THREAD_ID
        self._previous: Any = None
        self._received: list[FrameType | None] = []

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self._received.append(frame)

    def __enter__(self) -> None:
        if self._active:  # Python runs signal handlers on the main thread only
            self._previous = signal.signal(signal.SIGINT, self._hold)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._active:
            return
        previous = self._previous
        signal.signal(signal.SIGINT, previous)
        if self._received:
            if callable(previous):
                previous(signal.SIGINT, self._received[0])
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)


_MAIN_THREAD_ID = threading.main_thread().ident
