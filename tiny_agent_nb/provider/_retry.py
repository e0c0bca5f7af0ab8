"""How long to wait before the next attempt: pure functions, the caller owns the clock."""

from __future__ import annotations

import math
import time
from datetime import timezone
from email.utils import parsedate_to_datetime


def backoff_delay(
    attempt: int, retry_after: float | None, *, base: float = 1.0, cap: float = 30.0
) -> float:
    """Seconds to wait after attempt number `attempt` (1 = the first) failed.

    The server's `retry_after` wins when it gave one (it knows when it will accept us
    again); otherwise the wait doubles per attempt: base, 2*base, 4*base, ... Never more
    than `cap`, so a notebook cell never hangs for minutes on one step, never negative.
    """
    if retry_after is not None and math.isfinite(retry_after):
        delay = retry_after
    else:
        delay = base * 2.0 ** min(max(attempt, 1) - 1, 64)
    return min(max(delay, 0.0), cap)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """`Retry-After` as seconds from `now`: delta-seconds ("7", "1.5") or an HTTP date.

    None when absent or unreadable; a date in the past is 0.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000": RFC 9110 dates are GMT anyway
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)
