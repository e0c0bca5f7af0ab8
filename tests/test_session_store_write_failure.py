"""Commits that fail in the OS, and commits that race (docs/session-format.md §6.3, §6.5).

A write the OS refuses part-way (RLIMIT_FSIZE: a short write, then EFBIG — the same path
as ENOSPC) must raise SessionWriteError, cut the file back to its last transaction and
leave memory as it was. This runs in a child process because the limit and the ignored
SIGXFSZ apply to the whole process.

Concurrent commits from many threads all land, in the order they arrived.
"""

from __future__ import annotations

import errno
import gc
import itertools
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from tiny_agent_nb.session import Fact, HeaderInit, SessionStore, UserEntry, load_session
from tiny_agent_nb.session import facts as f

CHILD = Path(__file__).parent / "children" / "write_fail.py"
TIMEOUT_S = 30.0


# ---------------------------------------------------------------- a refused write


@pytest.mark.parametrize(
    "room",
    [
        pytest.param(0, id="nothing-fits"),
        pytest.param(1024, id="short-write-then-EFBIG"),
    ],
)
def test_refused_write_changes_nothing_and_a_later_commit_succeeds(
    session_path: Path, room: int
) -> None:
    done = subprocess.run(
        [sys.executable, str(CHILD), str(session_path), str(room)],
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    seen = json.loads(done.stdout)

    assert seen["error"] == "SessionWriteError", seen
    assert seen["errno"] == errno.EFBIG
    assert str(session_path) in seen["message"]
    # The file is byte for byte what it was: the partial line was cut back.
    assert seen["bytes_unchanged"], seen
    assert seen["size_after"] == seen["size_before"]
    # Memory too: same summary, same lastSeq, and the retry reused the failed commit's
    # reserved entry id and operationId without being refused.
    assert seen["summary_unchanged"], seen
    assert seen["last_seq_after_failure"] == seen["last_seq_before"]
    assert seen["retry_seqs"] == [seen["last_seq_before"] + 1, seen["last_seq_before"] + 2]
    assert seen["reloaded_equals_memory"], seen

    state = load_session(session_path)
    assert state.torn_tail_bytes == 0
    assert state.last_seq == seen["last_seq_before"] + 2
    assert state.open_operation is not None  # the retried runStarted opened it
    text = session_path.read_text()
    assert "Summarize this log" not in text  # nothing of the refused transaction remains
    assert text.endswith("\n") and "Summarize the log." in text.splitlines()[-1]


# ---------------------------------------------------------------- concurrent commits

THREADS = 8
EACH = 50


def test_concurrent_commits_all_land_in_arrival_order(
    store: SessionStore, session_path: Path
) -> None:
    """Commits are served first come, first served.

    Each commit takes a ticket right before calling commit(). That alone would be racy:
    a thread could be preempted between its ticket and its place in the store's queue.
    So the switch interval is made huge: a thread then gives up the GIL only when it
    blocks, which between taking its ticket and queueing in commit() it never does, so
    ticket order *is* arrival order, and the committed order must equal it. A store that
    let a returning thread barge ahead of waiting ones would fail this every time.
    The store is held busy by a subscriber until every thread has queued a commit.
    """
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        pytest.skip("arrival order is only observable from outside with the GIL")
    busy, release = threading.Event(), threading.Event()
    observed: list[str] = []

    def hold_first_commit(facts: Sequence[Fact]) -> None:
        observed.extend(content_of(fact) for fact in facts)
        if not busy.is_set():
            busy.set()
            assert release.wait(TIMEOUT_S)

    store.subscribe(hold_first_commit)
    ticket_lock = threading.Lock()
    tickets = itertools.count()
    ticket_of: dict[str, int] = {}
    queued = threading.Condition()
    first_commits_queued = 0
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        nonlocal first_commits_queued
        try:
            for i in range(EACH):
                content = f"{name}-{i}"
                fact = f.user_message(content)  # built before the ticket: no work in between
                with ticket_lock:
                    ticket_of[content] = next(tickets)
                if i == 0:
                    with queued:
                        first_commits_queued += 1
                        queued.notify()
                store.commit([fact])
        except BaseException as exc:
            errors.append(exc)
            raise

    holder = threading.Thread(target=store.commit, args=([f.user_message("holder")],))
    workers = [threading.Thread(target=worker, args=(f"t{n}",)) for n in range(THREADS)]
    interval = sys.getswitchinterval()
    gc.disable()  # no finalizer may run (and block) between a ticket and its commit
    sys.setswitchinterval(100.0)
    try:
        holder.start()
        assert busy.wait(TIMEOUT_S)
        for thread in workers:
            thread.start()
        with queued:
            # This thread runs again only once each worker blocked, i.e. queued in commit().
            assert queued.wait_for(lambda: first_commits_queued == THREADS, TIMEOUT_S)
        release.set()
        for thread in [holder, *workers]:
            thread.join(TIMEOUT_S)
            assert not thread.is_alive()
    finally:
        release.set()
        sys.setswitchinterval(interval)
        gc.enable()
    assert not errors, errors

    state = load_session(session_path)
    contents = [content_of(fact) for fact in state.facts]
    assert [fact.seq for fact in state.facts] == list(range(1, THREADS * EACH + 2))
    assert contents[0] == "holder"
    assert sorted(contents[1:]) == sorted(ticket_of)  # every commit landed, once
    assert [ticket_of[c] for c in contents[1:]] == list(range(THREADS * EACH))
    assert observed == contents  # subscribers saw the commits in the same order
    assert store.load().summary() == state.summary()


def content_of(fact: Fact) -> str:
    body = getattr(fact, "entry", None)
    assert isinstance(body, UserEntry)
    return body.message.content


class LeftTheQueue(Exception):
    """Raised by a SIGALRM handler in the main thread while its commit waits its turn."""


def test_a_commit_that_leaves_the_queue_gives_its_turn_back(
    session_path: Path, header_init: HeaderInit
) -> None:
    """A signal handler may raise while a commit waits for the one ahead of it (SIGINT is
    held back, other signals are not). That commit writes nothing, and the commits after
    it are served: its ticket does not stay in the queue for ever.

    Everything that could wait for ever runs in the main thread under an alarm, and the
    store is closed only on success: a turn never given back fails this test instead of
    hanging the suite."""
    store = SessionStore.open(session_path, create=header_init)
    busy, release = threading.Event(), threading.Event()

    def hold_first_commit(facts: Sequence[Fact]) -> None:
        if not busy.is_set():
            busy.set()
            assert release.wait(TIMEOUT_S)

    unsubscribe = store.subscribe(hold_first_commit)
    holder = threading.Thread(target=store.commit, args=([f.user_message("holder")],))
    holder.start()
    assert busy.wait(TIMEOUT_S)
    # The alarm fires while this commit waits behind the holder.
    with pytest.raises(LeftTheQueue), alarm(0.2):
        store.commit([f.user_message("gave up")])
    release.set()
    holder.join(TIMEOUT_S)
    unsubscribe()

    try:
        with alarm(TIMEOUT_S):
            store.commit([f.user_message("after")])
    except LeftTheQueue:
        pytest.fail("the next commit waited for the abandoned turn")
    contents = [content_of(fact) for fact in load_session(session_path).facts]
    assert contents == ["holder", "after"]
    assert store.load().summary() == load_session(session_path).summary()
    store.close()


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise LeftTheQueue in the main thread after `seconds`, unless the block ends first."""

    def leave(signum: int, frame: object) -> None:
        raise LeftTheQueue

    previous = signal.signal(signal.SIGALRM, leave)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
