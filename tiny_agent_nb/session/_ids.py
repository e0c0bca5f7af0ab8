"""UUIDv7 ids (RFC 9562): time-ordered, so a session file sorts the way it was written.

Layout: 48-bit Unix epoch milliseconds, version 7, then the 12-bit `rand_a` field holds
the sub-millisecond fraction of the clock (RFC 9562 §6.2, method 3), so ids made one
after another in a process sort in creation order without any shared counter; the
62-bit `rand_b` comes from the OS CSPRNG.

Why not `uuid6.uuid7()`: it keeps ids monotonic by adding 1 ms to the timestamp of
every id made within the same millisecond, so a burst runs ahead of the clock (20,000
ids in 73 ms came out stamped 20 s in the future, which a session file would then
claim as creation time), and it costs ~5 µs per id against ~1 µs here, on the commit
path of every fact.
"""

from __future__ import annotations

import os
import re
import struct
import time
from collections.abc import Iterator

UUID7_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
_UUID7 = re.compile(UUID7_PATTERN)

_time_ns = time.time_ns
_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0b10 << 62
_RAND_B = (1 << 62) - 1


# Random bits come from the OS CSPRNG 4 KB at a time: a getrandom() call per id costs
# more than the rest of new_id once the CPU caches are cold (as after every fsync of a
# `durability="power"` commit). `next()` on the iterator is atomic under the GIL, so
# two threads never get the same word; a forked child draws a fresh buffer, or parent
# and child would hand out the same ids.
class _RandomWords:
    def __init__(self) -> None:
        self._words: Iterator[tuple[int]] = iter(())

    def refill(self) -> None:
        self._words = struct.iter_unpack(">Q", os.urandom(4096))

    def __call__(self) -> int:
        try:
            return next(self._words)[0]
        except StopIteration:
            self.refill()
            return next(self._words)[0]


_random_word = _RandomWords()
os.register_at_fork(after_in_child=_random_word.refill)


def new_id() -> str:
    """A fresh UUIDv7 string, for ids that must be reserved before their fact exists."""
    ms, ns = divmod(_time_ns(), 1_000_000)
    fraction = ns * 4096 // 1_000_000  # 12 bits, steps of ~244 ns
    value = ms << 80 | _VERSION_7 | fraction << 64 | _VARIANT_RFC | _random_word() & _RAND_B
    h = value.to_bytes(16, "big").hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def is_uuid7(value: str) -> bool:
    return _UUID7.match(value) is not None
