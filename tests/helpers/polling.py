"""The one poller of the tests: wait until a condition holds, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | None],
    timeout: float = 20.0,
    what: str = "",
    *,
    interval: float = 0.02,
) -> T:
    """Poll `condition` every `interval` seconds until it returns something truthy (which
    is returned); fail after `timeout` seconds, naming `what` (or the condition)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or condition}")
        time.sleep(interval)
