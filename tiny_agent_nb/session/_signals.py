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
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def sigint_deferred() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # Python delivers signals to the main thread only
        return
    received: list[FrameType | None] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(frame)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            if callable(previous):
                previous(signal.SIGINT, received[0])
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)
