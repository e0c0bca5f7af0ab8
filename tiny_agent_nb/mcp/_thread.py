"""The one event-loop thread that owns every MCP session: the SDK is async, the kernel
is not. The kernel's thread waits in short slices so that Ctrl-C (a KeyboardInterrupt
raised in it) is felt at once, whatever the platform does with a long lock wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_SLICE = 0.1  # seconds between looks at Ctrl-C while waiting


class LoopThread:
    """An asyncio loop running in a daemon thread until `stop`. Daemon: a kernel exiting
    without close() must not wait on it; the servers die with the kernel (the guard)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="tiny-agent-nb MCP", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive() and not self._loop.is_closed()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            # Whatever is left was abandoned by a bounded stop: cancel it, let it unwind.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.wait(pending, timeout=2.0))
            self._loop.close()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def call_soon(self, callback: Any, *args: Any) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback, *args)

    def stop(self, timeout: float) -> None:
        """Stop the loop; the thread ends within about `timeout` seconds."""
        # RuntimeError: the loop closed between the check and the call.
        with contextlib.suppress(RuntimeError):
            self.call_soon(self._loop.stop)
        self._thread.join(timeout)


def wait_done(futures: list[concurrent.futures.Future[Any]], timeout: float) -> bool:
    """Wait until every future is done or `timeout` passed; True when all are done."""
    deadline = time.monotonic() + timeout
    while pending := [f for f in futures if not f.done()]:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        concurrent.futures.wait(pending, timeout=min(left, _SLICE))
    return True


def wait_event(event: threading.Event, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not event.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        event.wait(min(left, _SLICE))
    return True
