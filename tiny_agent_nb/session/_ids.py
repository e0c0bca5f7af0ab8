"""UUIDv7 ids (RFC 9562): time-ordered, so a session file sorts the way it was written.

Layout: 48-bit Unix epoch milliseconds, version 7, then the 12-bit `rand_a` field holds
the sub-millisecond fraction of the clock (RFC 9562 §6.2, method 3), so ids sort in
the order they were made; the 62-bit `rand_b` comes from the OS CSPRNG.

Why not `uuid6.uuid7()`: it keeps ids monotonic by adding 1 ms to the timestamp of
every id made within the same millisecond, so a burst runs ahead of the clock (20,000
ids in 73 ms came out stamped 20 s in the future, which a session file would then
claim as creation time).

Ids made in one process are strictly increasing in the order they are handed out, from
any number of threads: the clock is read under a lock, and an id whose clock step
(ms and fraction) is not past the previous id's takes the next step instead. A burst
only runs ahead of the clock while ids come faster than one per step (~244 ns), which
one CPython process never sustains; when the wall clock steps back (NTP), ids go on from
the previous one until the clock catches up.
"""

from __future__ import annotations

import os
import re
import threading
import time

UUID7_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
_UUID7 = re.compile(UUID7_PATTERN)

_time_ns = time.time_ns  # the clock (a test steps it back)
_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0b10 << 62
_RAND_B = (1 << 62) - 1


class _IdSource:
    """The clock step of the last id, read and advanced under a lock (a read-modify-write
    on any build of Python)."""

    def __init__(self) -> None:
        self.last_step = 0  # ms << 12 | fraction of the previous id
        self.reset()

    def reset(self) -> None:
        """A fresh lock: a forked child must not wait for a lock another thread of the
        parent held at fork()."""
        self.lock = threading.Lock()

    def new_id(self) -> str:
        """A fresh UUIDv7 string, for ids that must be reserved before their fact exists."""
        with self.lock:
            ms, ns = divmod(_time_ns(), 1_000_000)
            step = ms << 12 | ns * 4096 // 1_000_000  # the fraction: 12 bits, ~244 ns each
            if step <= self.last_step:
                step = self.last_step + 1
            self.last_step = step
        word = int.from_bytes(os.urandom(8), "big")
        ms, fraction = step >> 12, step & 0xFFF
        value = ms << 80 | _VERSION_7 | fraction << 64 | _VARIANT_RFC | word & _RAND_B
        h = value.to_bytes(16, "big").hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_source = _IdSource()
os.register_at_fork(after_in_child=_source.reset)
new_id = _source.new_id


def is_uuid7(value: str) -> bool:
    return _UUID7.match(value) is not None
