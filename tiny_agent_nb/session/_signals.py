"""Keep a notebook interrupt from landing inside a commit.

Jupyter's "interrupt kernel" sends SIGINT, which Python turns into KeyboardInterrupt
at an arbitrary bytecode of the main thread. Inside `commit` that could fall between
the write and the in-memory merge, or inside the FIFO lock's bookkeeping (leaving every
later commit waiting forever). So on the main thread a commit holds SIGINT back and
delivers it, to whatever handler was installed, the moment the commit is done.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType, TracebackType
from typing import Any


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
