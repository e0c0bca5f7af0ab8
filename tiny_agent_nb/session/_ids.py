"""UUIDv7 ids (RFC 9562): time-ordered, so a session file sorts the way it was written.

Layout: 48-bit Unix epoch milliseconds, version 7, then the 12-bit `rand_a` field holds
the sub-millisecond fraction of the clock (RFC 9562 §6.2, method 3), so ids sort in
the order they were made; the 62-bit `rand_b` comes from the OS CSPRNG.

Why not `uuid6.uuid7()`: it keeps ids monotonic by adding 1 ms to the timestamp of
every id made within the same millisecond, so a burst runs ahead of the clock (20,000
ids in 73 ms came out stamped 20 s in the future, which a session file would then
claim as creation time), and it costs several times what new_id does, on the commit
path of every fact (docs/benchmarks.md, register row "ids").

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
import struct
import threading
import time
from collections.abc import Iterator

UUID7_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
_UUID7 = re.compile(UUID7_PATTERN)

_time_ns = time.time_ns
_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0b10 << 62
_RAND_B = (1 << 62) - 1


# perf: register row "ids" (docs/benchmarks.md). Random bits come from the OS CSPRNG
# 4 KB at a time: a getrandom() call per id costs more than the rest of new_id once the
# CPU caches are cold (as after every fsync of a `durability="power"` commit).
class _IdSource:
    """The clock step of the last id and the buffer of random words, read under one lock.

    `next()` on a shared iterator is atomic under the GIL but not on free-threaded
    Python, where two threads could get the same word; and the step check below is a
    read-modify-write on any build. The lock is always taken: uncontended it costs less
    than the commit benchmark can see (register row "ids").
    """

    def __init__(self) -> None:
        self.last_step = 0  # ms << 12 | fraction of the previous id
        self.reset()

    def reset(self) -> None:
        """A fresh lock and buffer: a forked child must not hand out the parent's random
        words, nor wait for a lock another thread of the parent held at fork()."""
        self.lock = threading.Lock()
        self._words: Iterator[tuple[int]] = iter(())

    def new_id(self) -> str:
        """A fresh UUIDv7 string, for ids that must be reserved before their fact exists."""
        lock = self.lock  # perf: acquire/release, not `with` (register row "ids")
        lock.acquire()
        try:
            ms, ns = divmod(_time_ns(), 1_000_000)
            step = ms << 12 | ns * 4096 // 1_000_000  # the fraction: 12 bits, ~244 ns each
            if step <= self.last_step:
                step = self.last_step + 1
            self.last_step = step
            try:
                word: int = next(self._words)[0]
            except StopIteration:
                self._words = struct.iter_unpack(">Q", os.urandom(4096))
                word = next(self._words)[0]
        finally:
            lock.release()
        ms, fraction = step >> 12, step & 0xFFF
        value = ms << 80 | _VERSION_7 | fraction << 64 | _VARIANT_RFC | word & _RAND_B
        h = value.to_bytes(16, "big").hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_source = _IdSource()
os.register_at_fork(after_in_child=_source.reset)
new_id = _source.new_id


def is_uuid7(value: str) -> bool:
    return _UUID7.match(value) is not None
