"""Power mode's group commit (docs/session-format.md §6.2) against a disk that refuses to sync.

The disk is the real seam: os.fsync and os.fdatasync are replaced in this test process,
failing with EIO while `Disk.failing` is set. What came of an effect (an answer, a tool
result) is written unsynced and left for the next sync or `close()`: when that sync
fails, `close()` still closes the file and raises. These tests check that whoever closes
the store (`%agent session`, `%agent new`, the kernel's exit) survives that and says so.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import LoopObserver
from tiny_agent_nb.notebook import NotebookError, NotebookRuntime, TinyAgent, resolve_session_path
from tiny_agent_nb.provider import StreamEvent
from tiny_agent_nb.session import HeaderInit, SessionStore, SessionWriteError, load_session

from helpers.ipython_shell import KEY, fresh_shell, run, served
from helpers.openai_server import OpenAIServer, text_reply
from helpers.scenario import READ_FILE, Run


class Disk:
    """os.fsync / os.fdatasync of this process, failing with EIO while `failing`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.failing = False
        self.fail_after: int | None = None  # syncs that still succeed, then `failing`
        self.refused = 0
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name)))

    def _wrap(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            if self.fail_after is not None:
                self.failing = self.fail_after == 0
                self.fail_after = None if self.failing else self.fail_after - 1
            if self.failing:
                self.refused += 1
                raise OSError(errno.EIO, "Input/output error")
            real(fd)

        return sync


class FailsOnceAnswered(LoopObserver):
    """The disk starts failing while the model's answer streams in: its stepAttempt was
    synced, the answer is written unsynced, and the run's end cannot be synced."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk

    def on_stream(self, event: StreamEvent) -> None:
        self.disk.failing = True


@pytest.fixture
def agent(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[NotebookRuntime]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TINY_AGENT_API_KEY", KEY)
    config = TinyAgent(base_url=server.base_url, model="test/model", durability="power")
    runtime = NotebookRuntime(config, {})
    yield runtime
    runtime.close()


def _at(path: Path) -> Any:  # a SessionLocation (a private name of the notebook)
    """`%agent session PATH`'s location."""
    return resolve_session_path(explicit=str(path), environ={}, user_ns={}, cwd=path.parent)


def _power_store(path: Path) -> SessionStore:
    here = str(path.parent)
    init = HeaderInit(cwd=here, provider="p", model="m", environment_identity=here)
    return SessionStore.open(path, create=init, durability="power")


def _power_session(path: Path) -> None:
    _power_store(path).close()


def _is_file(path: Path) -> Callable[[int], bool]:
    """Is a descriptor open on `path` (as it is now), not on another file."""
    ours = path.stat()

    def is_ours(fd: int) -> bool:
        st = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (ours.st_dev, ours.st_ino)

    return is_ours


def _answered_but_unsynced(agent: NotebookRuntime, server: OpenAIServer, disk: Disk) -> None:
    """A run whose answer is in the file but whose end the disk refused to sync."""
    server.enqueue(text_reply("done"))
    with pytest.raises(NotebookError, match="could not be recorded"):
        agent.run("answer", observer=FailsOnceAnswered(disk), ask=None)


def test_switching_sessions_when_the_old_ones_sync_fails_opens_the_new_one_and_says_so(
    agent: NotebookRuntime, server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = Disk(monkeypatch)
    first, second = tmp_path / "a.agent.jsonl", tmp_path / "b.agent.jsonl"
    _power_session(second)
    agent.open(_at(first))
    _answered_but_unsynced(agent, server, disk)
    refused = disk.refused
    # `%agent session b.agent.jsonl` while the disk still refuses a's pending sync.
    report = agent.open(_at(second))
    assert disk.refused > refused  # a's close did try to sync what it had left pending
    assert agent.store is not None and agent.store.path == second
    text = report.text()
    assert "could not sync" in text and "a.agent.jsonl" in text
    assert "whether the last ones reached the disk is not known" in text
    disk.failing = False
    # a was released (its lock and this process's claim), its answer kept in the file.
    with SessionStore.open(first) as again:
        assert [e.entry.type for e in again.load().entries.values()][-1] == "message"
        assert again.open_operation() is not None  # the next load settles it
    server.enqueue(text_reply("ok"))
    result = agent.run("and in b?", observer=LoopObserver(), ask=None)
    assert result.outcome == "completed"
    assert load_session(second).open_operation is None


def test_closing_when_the_pending_sync_fails_forgets_the_store_and_says_why(
    agent: NotebookRuntime, server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = Disk(monkeypatch)
    path = tmp_path / "a.agent.jsonl"
    agent.open(_at(path))
    told: list[object] = []
    agent.watch(told.append)
    _answered_but_unsynced(agent, server, disk)
    with pytest.raises(NotebookError, match=r"could not sync \S*a\.agent\.jsonl when closing it"):
        agent.close()  # the kernel's exit, or %unload_ext
    assert agent.store is None  # not a closed store still taken for the open session
    assert told[-1] == ()  # the displays were told the session is gone
    disk.failing = False
    SessionStore.open(path).close()  # released
    agent.close()  # again: nothing left to close, nothing raised


def test_a_new_session_when_the_old_ones_sync_fails_starts_it_and_says_so(
    agent: NotebookRuntime, server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = Disk(monkeypatch)
    path = tmp_path / "a.agent.jsonl"
    agent.open(_at(path))
    _answered_but_unsynced(agent, server, disk)
    disk.failing = False  # the new file's creation syncs: the disk is back by then
    failing_once = {"left": 1}
    real = os.fsync

    def fails_once(fd: int) -> None:
        if failing_once["left"]:
            failing_once["left"] -= 1
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fails_once)
    monkeypatch.setattr(os, "fdatasync", fails_once)
    archived, report = agent.new()  # `%agent new`: the old file's close sync fails
    assert report.created and agent.store is not None and agent.store.path == path
    assert "could not sync" in report.text()
    assert load_session(archived).open_operation is not None  # kept, settled at its next load


def test_unloading_when_the_pending_sync_fails_unloads_and_says_so(
    server: OpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for shell in fresh_shell(tmp_path, monkeypatch, served(server.base_url, KEY)):
        shell.config.TinyAgent.durability = "power"
        run(shell, "%load_ext tiny_agent_nb", capsys)
        disk = Disk(monkeypatch)
        server.enqueue(text_reply("done"))
        # The run's start and its stepAttempt sync; its end does not (the disk fails
        # from then on), so its answer is left unsynced for the close.
        disk.fail_after = 2
        out = run(shell, "%%agent\nanswer", capsys)
        assert "could not be recorded" in out
        out = run(shell, "%unload_ext tiny_agent_nb", capsys)
        assert "could not sync" in out and "analysis.agent.jsonl" in out
        assert not any(type(c).__name__ == "TinyAgent" for c in shell.configurables)
        disk.failing = False
        SessionStore.open(tmp_path / "analysis.agent.jsonl").close()  # released


def test_a_run_whose_start_the_disk_refuses_says_so_and_records_nothing(
    agent: NotebookRuntime, server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's first commit (its prompt and runStarted) syncs before the run goes on:
    a refused sync is the run's first failure, said as one (not a traceback)."""
    disk = Disk(monkeypatch)
    path = tmp_path / "a.agent.jsonl"
    agent.open(_at(path))
    before = path.read_bytes()
    disk.failing = True
    with pytest.raises(NotebookError, match=r"could not start.*Input/output error"):
        agent.run("answer", observer=LoopObserver(), ask=None)
    assert path.read_bytes() == before and server.requests == []
    disk.failing = False
    server.enqueue(text_reply("done"))
    assert agent.run("answer", observer=LoopObserver(), ask=None).outcome == "completed"


def test_a_session_whose_writer_closed_itself_is_said_and_opened_again(
    agent: NotebookRuntime, server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write fails part-way and its cut back fails too: the writer closes itself
    (docs/session-format.md §6.3). The next cell says so in a line, and `%agent session` on the
    same path opens it again (not "already open": the store it holds is closed)."""
    path = tmp_path / "a.agent.jsonl"
    agent.open(_at(path))
    real_write, is_ours = os.write, _is_file(path)

    def write(fd: int, data: bytes) -> int:
        if is_ours(fd):
            real_write(fd, bytes(data[:10]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    def ftruncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as disk:
        disk.setattr(os, "write", write)
        disk.setattr(os, "ftruncate", ftruncate)
        with pytest.raises(NotebookError, match=r"could not start.*No space left"):
            agent.run("answer", observer=LoopObserver(), ask=None)
    with pytest.raises(NotebookError, match=r"a\.agent\.jsonl was closed.*%agent session"):
        agent.run("again", observer=LoopObserver(), ask=None)
    report = agent.open(_at(path))
    assert report.repaired_tail_bytes == 10  # the torn end is cut as the file opens
    server.enqueue(text_reply("done"))
    assert agent.run("again", observer=LoopObserver(), ask=None).outcome == "completed"


# ---------------------------------------------------------------- the store alone


def test_a_writer_that_closes_itself_after_a_failed_cut_first_syncs_what_it_owed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills during an intent's append and the cut back fails too: the writer
    closes itself (docs/session-format.md §6.3). The answer committed before it was acknowledged
    and left for the next sync or close() (§6.2); that close is this one."""
    path = tmp_path / "nb.agent.jsonl"
    store = _power_store(path)
    run = Run(environment=str(tmp_path))
    store.commit(run.start("Read it"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("call_1", "read_file", {"path": "README.md"})]))
    answered = path.stat().st_size
    synced: list[int] = []
    real_fsync, real_write = os.fsync, os.write
    is_ours = _is_file(path)

    def fsync(fd: int) -> None:
        if is_ours(fd):
            synced.append(os.fstat(fd).st_size)
        real_fsync(fd)

    def write(fd: int, data: bytes) -> int:
        if is_ours(fd):
            real_write(fd, bytes(data[:10]))  # a short write, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    def ftruncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fsync)
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "ftruncate", ftruncate)
    with pytest.raises(SessionWriteError, match="No space left"):
        store.commit([run.intent("call_1", READ_FILE, {"path": "README.md"})])
    assert store.closed
    assert synced and synced[-1] >= answered  # the answer's sync was not dropped
    monkeypatch.undo()
    state = load_session(path)  # the partial intent is a torn tail
    assert state.torn_tail_bytes == 10 and state.tool_intents == {}


def test_after_a_failed_sync_the_lines_it_covered_are_written_again_before_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux reports a failed writeback once: the pages it covered may be marked clean
    and a later fsync writes nothing of them and succeeds. Before group commit a failed
    sync covered only its own line, which is cut; now it also covers the answer written
    unsynced before it, so the store writes those bytes again (unchanged) before it
    syncs next, or the next intent's sync would vouch for an answer it never wrote."""
    path = tmp_path / "nb.agent.jsonl"
    store = _power_store(path)
    run = Run(environment=str(tmp_path))
    store.commit(run.start("Read it"))
    store.commit(run.attempt())
    synced_at = path.stat().st_size
    store.commit(run.answer(None, [("call_1", "read_file", {"path": "README.md"})]))
    answered = path.read_bytes()
    is_ours = _is_file(path)
    events: list[tuple[str, int, int]] = []  # (call, offset or size, length)
    real_fsync, real_pwrite = os.fsync, os.pwrite
    failing = {"left": 1}

    def fsync(fd: int) -> None:
        if is_ours(fd):
            events.append(("fsync", os.fstat(fd).st_size, 0))
            if failing["left"]:
                failing["left"] -= 1
                raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        if is_ours(fd):
            events.append(("pwrite", offset, len(data)))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fsync)
    monkeypatch.setattr(os, "pwrite", pwrite)
    intent = run.intent("call_1", READ_FILE, {"path": "README.md"})
    with pytest.raises(SessionWriteError, match="Input/output error"):
        store.commit([intent])
    assert path.read_bytes() == answered
    events.clear()
    store.commit([intent])  # the same intent again: the disk is back
    rewritten = sum(n for call, at, n in events if call == "pwrite" and at == synced_at)
    call, size, _ = events[-1]
    assert call == "fsync"
    # Everything past the last good sync (the answer, and the intent just appended) was
    # written again before this sync.
    assert size > len(answered) and rewritten == size - synced_at
    assert path.read_bytes().startswith(answered)  # unchanged, and the intent after it
    events.clear()
    store.commit([Run.result(intent, "# Demo\n")])
    store.commit(run.attempt())
    assert [call for call, _, _ in events] == ["fsync"]  # once written, not again
    store.close()
    assert load_session(path).tool_intents[intent.id or ""].status == "completed"
