"""Fact ids are RFC 9562 UUIDv7 strings whose timestamp is the clock's, even in bursts."""

from __future__ import annotations

import itertools
import os
import time
import uuid

import uuid6

from tiny_agent_nb.session import new_id
from tiny_agent_nb.session._ids import is_uuid7


def test_ids_parse_as_version_7_with_the_rfc_variant() -> None:
    for value in (new_id() for _ in range(1000)):
        parsed = uuid.UUID(value)
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == value  # lowercase, canonical dashes
        assert is_uuid7(value)


def test_timestamp_is_the_clock_not_ahead_of_it_after_a_burst() -> None:
    before = time.time_ns() // 1_000_000
    burst = [new_id() for _ in range(20_000)]
    after = time.time_ns() // 1_000_000
    stamps = [uuid6.UUID(value).time for value in burst]  # unix_ts_ms, read by uuid6
    assert before <= min(stamps)
    # uuid6.uuid7() would stamp the last of these ~20 s into the future.
    assert max(stamps) <= after


def test_ids_sort_in_creation_order_and_are_unique() -> None:
    burst = [new_id() for _ in range(20_000)]
    assert len(set(burst)) == len(burst)
    # Sub-millisecond clock bits order a burst; two ids in the same ~244 ns step may tie
    # on time and then order randomly, which a tight loop can hit, so allow a few.
    inversions = sum(a > b for a, b in itertools.pairwise(burst))
    assert inversions < len(burst) // 100


def test_a_forked_child_does_not_repeat_the_parents_random_bits() -> None:
    """A forked child draws its own random bits, never the parent's."""
    new_id()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids and leave without running any cleanup
        os.close(read_end)
        os.write(write_end, "\n".join(new_id() for _ in range(50)).encode())
        os._exit(0)
    os.close(write_end)
    parent = [new_id() for _ in range(50)]
    with os.fdopen(read_end, "rb") as pipe:
        child = pipe.read().decode().split("\n")
    os.waitpid(pid, 0)
    assert len(child) == 50

    def random_part(value: str) -> str:
        return value[-12:]  # the last 48 of rand_b's 62 random bits

    assert not {random_part(v) for v in parent} & {random_part(v) for v in child}
