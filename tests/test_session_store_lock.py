"""One writer per session file (docs/session-format.md §6.4): across processes, in-process,
and readers.

The holder of the cross-process tests is a real child process (`children/hold_lock.py`)
that opens the store and blocks on stdin; it is SIGKILLed like a dead kernel.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiny_agent_nb.session import HeaderInit, SessionLockedError, SessionStore, load_session
from tiny_agent_nb.session import facts as f

from helpers.scenario import complete_run

HOLDER = Path(__file__).parent / "children" / "hold_lock.py"
TIMEOUT_S = 30.0
OLD_NS = 1_000_000_000 * 1_000_000_000  # 2001-09-09: any write would move mtime to now


class Holder:
    """A child process holding the session open for writing."""

    def __init__(self, path: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HOLDER), str(path), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.pid = self.proc.pid
        line = self._read_line()
        assert line.startswith("ready "), line
        _, last_seq, sleep_pid = line.split()
        self.last_seq = int(last_seq)
        self.sleep_pid = int(sleep_pid)

    def _read_line(self) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + TIMEOUT_S
        line = b""
        while not line.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            chunk = os.read(fd, 1) if ready else b""
            if not chunk:
                self.sigkill()
                assert self.proc.stderr is not None
                raise AssertionError(f"holder gave no ready line: {self.proc.stderr.read()!r}")
            line += chunk
        return line.decode()

    def sigkill(self) -> None:
        """Kill -9, like an OOM-killed kernel, and wait until it is gone."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(TIMEOUT_S)

    def close(self) -> None:
        self.sigkill()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def holder(session_path: Path) -> Iterator[Holder]:
    h = Holder(session_path)
    yield h
    h.close()


def file_image(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


# ---------------------------------------------------------------- across processes


def test_writer_in_another_process_is_refused_with_the_holders_pid(
    holder: Holder, session_path: Path, header_init: HeaderInit
) -> None:
    before = file_image(session_path)
    with pytest.raises(SessionLockedError) as refused:
        SessionStore.open(session_path, create=header_init)
    assert refused.value.holder_pid == holder.pid
    assert refused.value.in_process is False
    assert f"process {holder.pid}" in str(refused.value)
    assert file_image(session_path) == before  # the refused writer touched nothing
    # Refused again: the failed attempt left no claim behind in this process either.
    with pytest.raises(SessionLockedError):
        SessionStore.open(session_path)


def test_sigkilled_holder_frees_the_file_for_a_new_writer(
    holder: Holder, session_path: Path, header_init: HeaderInit
) -> None:
    with pytest.raises(SessionLockedError):
        SessionStore.open(session_path, create=header_init)
    holder.sigkill()
    assert holder.proc.returncode == -signal.SIGKILL
    with SessionStore.open(session_path, create=header_init) as store:
        assert not store.created
        assert store.load().last_seq == holder.last_seq > 0
        store.commit([f.user_message("after the kernel died")])
    assert load_session(session_path).last_seq == holder.last_seq + 1


def test_holder_that_closes_frees_the_file(
    holder: Holder, session_path: Path, header_init: HeaderInit
) -> None:
    assert holder.proc.stdin is not None
    holder.proc.stdin.close()  # the holder closes its store and exits
    assert holder.proc.wait(TIMEOUT_S) == 0
    with SessionStore.open(session_path, create=header_init) as store:
        assert store.load().last_seq == holder.last_seq


def test_lock_is_not_inherited_by_a_process_the_writer_spawned(
    session_path: Path, header_init: HeaderInit
) -> None:
    holder = Holder(session_path, "--spawn-sleep")
    try:
        proc_fds = Path(f"/proc/{holder.sleep_pid}/fd")
        if proc_fds.is_dir():
            targets = [os.path.realpath(fd) for fd in proc_fds.iterdir()]
            assert os.path.realpath(session_path) not in targets
        holder.sigkill()
        os.kill(holder.sleep_pid, 0)  # the grandchild still runs (raises if it is gone)
        with SessionStore.open(session_path, create=header_init) as store:
            assert store.load().last_seq == holder.last_seq
    finally:
        holder.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder.sleep_pid, signal.SIGKILL)


def test_reader_works_while_another_process_writes_and_changes_nothing(
    holder: Holder, session_path: Path
) -> None:
    os.utime(session_path, ns=(OLD_NS, OLD_NS))
    before = file_image(session_path)
    state = load_session(session_path)
    assert state.last_seq == holder.last_seq
    assert file_image(session_path) == before


# ---------------------------------------------------------------- in one process


def test_second_writer_in_the_same_process_is_refused(
    store: SessionStore, session_path: Path, header_init: HeaderInit
) -> None:
    with pytest.raises(SessionLockedError) as refused:
        SessionStore.open(session_path, create=header_init)
    assert refused.value.in_process is True
    assert "another SessionStore in this process" in str(refused.value)
    # The refusal did not disturb the first writer, nor release its claim.
    store.commit([f.user_message("still mine")])
    with pytest.raises(SessionLockedError):
        SessionStore.open(session_path)
    assert load_session(session_path).last_seq == 1


def test_other_spellings_of_the_same_file_are_refused(
    store: SessionStore, session_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = tmp_path / "link.jsonl"
    link.symlink_to(session_path)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    for spelling in (Path("..") / session_path.name, link, Path("../sub/../link.jsonl")):
        with pytest.raises(SessionLockedError) as refused:
            SessionStore.open(spelling)
        assert refused.value.in_process is True, spelling
    # A hard link is another name the realpath cannot see through; the OS lock still refuses.
    hard = tmp_path / "hard.jsonl"
    hard.hardlink_to(session_path)
    with pytest.raises(SessionLockedError) as refused:
        SessionStore.open(hard)
    assert refused.value.holder_pid == os.getpid()
    store.commit([f.user_message("the first writer is unaffected")])
    assert load_session(link).last_seq == 1


def test_closed_writer_makes_room_for_the_next(session_path: Path, header_init: HeaderInit) -> None:
    first = SessionStore.open(session_path, create=header_init)
    complete_run(first)
    committed = first.load().last_seq
    with pytest.raises(SessionLockedError):
        SessionStore.open(session_path)
    first.close()
    with SessionStore.open(session_path.parent / "." / session_path.name) as second:
        assert second.load().last_seq == committed
        second.commit([f.user_message("next writer")])
    assert load_session(session_path).last_seq == committed + 1


def test_reader_works_while_this_process_writes_and_changes_nothing(
    store: SessionStore, session_path: Path
) -> None:
    complete_run(store)
    before_seq = store.load().last_seq
    os.utime(session_path, ns=(OLD_NS, OLD_NS))
    before = file_image(session_path)
    assert load_session(session_path).summary() == store.load().summary()
    assert file_image(session_path) == before
    # Reading did not disturb the writer's lock (a POSIX lock would have been dropped).
    with pytest.raises(SessionLockedError):
        SessionStore.open(session_path)
    store.commit([f.user_message("written after a read")])
    assert load_session(session_path).last_seq == before_seq + 1


def test_reader_leaves_a_torn_tail_for_the_writer_to_repair(
    session_path: Path, header_init: HeaderInit
) -> None:
    with SessionStore.open(session_path, create=header_init) as store:
        complete_run(store)
        committed = store.load().last_seq
    torn = b'{"kind":"entry","seq":%d,"id":"01' % (committed + 1)  # a writer died mid-append
    with session_path.open("ab") as fh:
        fh.write(torn)
    os.utime(session_path, ns=(OLD_NS, OLD_NS))
    before = file_image(session_path)
    state = load_session(session_path)
    assert (state.last_seq, state.torn_tail_bytes) == (committed, len(torn))
    assert file_image(session_path) == before
    # Only a writer repairs, and it cuts exactly the torn bytes.
    with SessionStore.open(session_path) as store:
        assert store.repaired_tail_bytes == len(torn)
    assert session_path.read_bytes() == before[0][: -len(torn)]
