"""UUIDv7 ids made from many threads at once (session/_ids.py): unique, and strictly
increasing in the order they were handed out, GIL or not; a fork never inherits a held
id lock."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time

import pytest
import uuid6

from tiny_agent_nb.session import _ids, new_id

THREADS = 8
PER_THREAD = 4_000


def clock_step(value: str) -> int:
    """The id's 60 clock bits: unix_ts_ms and the 12-bit sub-millisecond fraction."""
    as_int = uuid6.UUID(value).int
    return (as_int >> 80) << 12 | (as_int >> 64) & 0xFFF


@pytest.fixture
def stopped_clock(monkeypatch: pytest.MonkeyPatch) -> int:
    """The clock `new_id` reads, stopped: every id falls in the same clock step, the case
    a fast machine (or a coarse clock) hits by chance and this one rarely does."""
    now = time.time_ns()
    monkeypatch.setattr(_ids, "_time_ns", lambda: now)
    return clock_step_of_ns(now)


def clock_step_of_ns(ns: int) -> int:
    ms, rest = divmod(ns, 1_000_000)
    return ms << 12 | rest * 4096 // 1_000_000


def test_ids_from_many_threads_are_unique_and_increase_in_each_thread(
    stopped_clock: int,
) -> None:
    before = _ids._source.last_step
    start = threading.Barrier(THREADS)
    made: list[list[str]] = [[] for _ in range(THREADS)]

    def worker(out: list[str]) -> None:
        start.wait()  # all threads draw at once, contending for the clock
        out.extend(new_id() for _ in range(PER_THREAD))

    threads = [threading.Thread(target=worker, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    every = [value for out in made for value in out]
    assert len(every) == THREADS * PER_THREAD
    assert len(set(every)) == len(every)
    # The random words too: a word handed to two threads would show here first.
    assert len({uuid6.UUID(v).int & ((1 << 62) - 1) for v in every}) == len(every)
    for out in made:
        assert all(a < b for a, b in itertools.pairwise(out))
    # Strictly increasing in hand-out order means no two ids share a clock step, so
    # the file sorts as it was written even where two threads read the same clock.
    steps = {clock_step(v) for v in every}
    assert len(steps) == len(every)
    # ...and they run ahead of a stopped clock by one step per id, no more.
    assert max(steps) <= max(stopped_clock, before) + len(every)


def test_a_burst_in_one_thread_never_ties_or_goes_backwards(stopped_clock: int) -> None:
    burst = [new_id() for _ in range(20_000)]
    assert all(a < b for a, b in itertools.pairwise(burst))


def test_ids_keep_increasing_when_the_clock_steps_back(monkeypatch: pytest.MonkeyPatch) -> None:
    earlier = new_id()
    monkeypatch.setattr(_ids, "_time_ns", lambda: time.time_ns() - 60 * 10**9)  # NTP: -1 min
    assert earlier < new_id() < new_id()


def test_a_child_forked_while_the_id_lock_is_held_still_makes_ids() -> None:
    """fork() copies a held lock as held, and nobody in the child would release it."""
    read_end, write_end = os.pipe()
    with _ids._source.lock:  # as if another thread were inside new_id at the fork
        pid = os.fork()
        if pid == 0:  # the child: it must not wait for the parent's lock
            try:
                os.close(read_end)
                os.write(write_end, new_id().encode())
            finally:
                os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung in new_id() on the inherited lock")
        time.sleep(0.01)
    with os.fdopen(read_end, "rb") as pipe:
        child_id = pipe.read().decode()
    assert os.waitstatus_to_exitcode(status) == 0
    assert _ids.is_uuid7(child_id)
    assert child_id != new_id()
