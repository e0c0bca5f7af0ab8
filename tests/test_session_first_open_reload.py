"""A writer's first open taking its tables from the snapshot it has just written
(register row "first-open-reload"), interrupted or raced: Ctrl-C inside the
reload, and another process changing the session or its snapshot between the write and
the reload. The session file stays whole and the writer's state is the file's, or the
open fails with every lock and descriptor released.

Ctrl-C is a KeyboardInterrupt raised by the call it would land in (the collection, the
decode), as a SIGINT there does; the other process is a real one, run in that window by
wrapping the writer's call to `reload_tables` (`_reader.state_from_new_snapshot`).
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.session import (
    HeaderInit,
    SessionCorruptError,
    SessionState,
    SessionStore,
    load_session,
)
from tiny_agent_nb.session import _reader as reader_module
from tiny_agent_nb.session import _snapshot as snapshot_module
from tiny_agent_nb.session._snapshot import SNAPSHOT_TAIL

from helpers.ipython_shell import run as run_cell
from helpers.ipython_shell import shell
from helpers.scenario import complete_run

__all__ = ["shell"]  # the fixture, from ipython_shell


def _init(tmp_path: Path) -> HeaderInit:
    return HeaderInit(cwd=str(tmp_path), provider="p", model="m", environment_identity="e")


def _runs(path: Path, init: HeaderInit, runs: int) -> None:
    with SessionStore.open(path, create=init) as store:
        for _ in range(runs):
            complete_run(store)


def _first_open_session(tmp_path: Path, name: str = "first.agent.jsonl") -> Path:
    """Long enough for a writer's open to snapshot it, with no snapshot beside it."""
    path = tmp_path / name
    _runs(path, _init(tmp_path), SNAPSHOT_TAIL // 8 + 8)  # 8 lines a run
    Path(f"{path}.snapshot").unlink()
    return path


def _fds() -> set[str]:
    gc.collect()  # a descriptor is closed when the last state holding it goes
    return {p.name for p in Path("/proc/self/fd").iterdir()}


def _same_as_full_read(state: SessionState, path: Path) -> None:
    full = load_session(path)
    assert state.summary() == full.summary()
    assert state.facts == full.facts


class _Once:
    """Raises KeyboardInterrupt at its first call, then is `real`."""

    def __init__(self, real: Callable[..., object]) -> None:
        self.real = real
        self.calls = 0

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        if self.calls == 1:
            raise KeyboardInterrupt
        return self.real(*args, **kwargs)


@pytest.fixture
def interrupt_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], _Once]]:
    def at(where: str) -> _Once:
        if where == "collection":  # the full collection after the reduced tables go
            once = _Once(gc.collect)
            monkeypatch.setattr(gc, "collect", once)
        else:  # the decode of the snapshot just written
            once = _Once(snapshot_module.decode_tables)
            monkeypatch.setattr(snapshot_module, "decode_tables", once)
        return once

    yield at


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")
@pytest.mark.parametrize("where", ["collection", "decode"])
def test_ctrl_c_inside_the_first_open_reload_leaves_no_half_open_store(
    where: str, tmp_path: Path, interrupt_at: Callable[[str], _Once]
) -> None:
    """The reduced tables are gone by then: the store must not be handed out with empty
    tables. The open fails, the file and its lock are as they were, and the next open
    (this process, then another) has every line."""
    path = _first_open_session(tmp_path)
    before, fds = path.read_bytes(), _fds()
    enabled = gc.isenabled()
    once = interrupt_at(where)
    with pytest.raises(KeyboardInterrupt) as raised:
        SessionStore.open(path)
    assert once.calls == 1
    del raised  # its traceback holds the open's frames
    assert path.read_bytes() == before
    assert gc.isenabled() == enabled
    assert _fds() == fds, "a descriptor of the interrupted open was left open"
    other = [
        sys.executable,
        "-c",
        f"from tiny_agent_nb.session import SessionStore; SessionStore.open({str(path)!r}).close()",
    ]
    subprocess.run(other, check=True, timeout=60, env={**os.environ})
    with SessionStore.open(path) as store:  # the in-process claim went too
        _same_as_full_read(store.load(), path)
        complete_run(store)
        after = store.load().summary()
    assert load_session(path).summary() == after


def _in_the_window(monkeypatch: pytest.MonkeyPatch, act: Callable[[Path], None]) -> None:
    """Run `act(path)` between the writer's snapshot write and its reload."""
    real = reader_module.reload_tables

    def wrapped(path: Path, *args: object) -> bool:
        act(path)
        return real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(reader_module, "reload_tables", wrapped)


def _another_process(code: str, *args: str) -> None:
    subprocess.run([sys.executable, "-c", code, *args], check=True, timeout=60)


_REWRITE_BYTE = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
at = int(sys.argv[2])
os.pwrite(fd, b"7", at)
os.close(fd)
"""


def test_a_line_rewritten_between_the_snapshot_and_its_reload_is_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process rewrites a digit of a line the snapshot covers, in place, after
    the writer wrote the snapshot and before it reloads it: the snapshot no longer
    matches the file, so the writer keeps what it reduced, and reading that line back
    says it changed on disk, never hands out the new bytes."""
    path = _first_open_session(tmp_path)
    data = path.read_bytes()
    at = data.index(b'"seq":3') + len(b'"seq":')
    _in_the_window(monkeypatch, lambda p: _another_process(_REWRITE_BYTE, str(p), str(at)))
    with SessionStore.open(path) as store:
        assert path.read_bytes()[at : at + 1] == b"7"
        with pytest.raises(SessionCorruptError, match="changed on disk"):
            store.load().facts  # noqa: B018


@pytest.mark.parametrize("swap", ["older", "another session's"])
def test_a_snapshot_swapped_between_its_write_and_its_reload_is_not_believed(
    swap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process replaces the snapshot just written: by an older authentic one of
    the same session (replayed), or by another session's (same key, other bytes). The
    writer's state is the file's, and it commits on it: its reduced tables were never let
    go (the snapshot is refused before), so nothing is reduced a second time."""
    path = tmp_path / "first.agent.jsonl"
    init = _init(tmp_path)
    _runs(path, init, SNAPSHOT_TAIL // 8 + 8)
    older = tmp_path / "older.snapshot"
    shutil.copy(f"{path}.snapshot", older)
    _runs(path, init, SNAPSHOT_TAIL // 8 + 8)
    Path(f"{path}.snapshot").unlink()
    other = _first_open_session(tmp_path, "other.agent.jsonl")
    with SessionStore.open(other):  # writes its snapshot
        pass
    replacement = older if swap == "older" else Path(f"{other}.snapshot")

    def act(p: Path) -> None:
        shutil.copy(replacement, tmp_path / "swap.tmp")
        (tmp_path / "swap.tmp").replace(f"{p}.snapshot")

    _in_the_window(monkeypatch, act)
    with SessionStore.open(path) as store:
        _same_as_full_read(store.load(), path)
        complete_run(store)
        after = store.load().summary()
    assert load_session(path).summary() == after
    assert "did not load" not in caplog.text


def test_ctrl_c_while_a_kernel_opens_its_session_says_so_in_one_line_and_loses_nothing(
    shell: InteractiveShell,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    interrupt_at: Callable[[str], _Once],
) -> None:
    """A first open of a long session reduces it, writes its snapshot and reloads it:
    seconds of work a user may interrupt. That printed a KeyboardInterrupt traceback
    out of `%load_ext`, and the kernel forgot which file it was to open."""
    path = _first_open_session(tmp_path, "analysis.agent.jsonl")  # the notebook's own
    before = path.read_bytes()
    interrupt_at("decode")
    out = run_cell(shell, "%load_ext tiny_agent_nb", capsys)
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert out.count("\n") == 1 and "opening analysis.agent.jsonl was interrupted" in out, out
    assert path.read_bytes() == before
    again = run_cell(shell, "%agent status", capsys)  # says why there is no session
    assert again.strip() == out.strip(), again
    retry = out.split("`")[1]
    assert retry == f"%agent session {path}", out
    opened = run_cell(shell, retry, capsys)
    assert "Traceback" not in opened, opened
    status = run_cell(shell, "%agent status", capsys)
    assert f"facts {load_session(path).last_seq}" in status, status


def test_ctrl_c_while_agent_new_claims_the_session_says_so_and_moves_nothing(
    shell: InteractiveShell,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    interrupt_at: Callable[[str], _Once],
) -> None:
    """After an open refused (here: interrupted), `%agent new` opens the file as its
    writer before moving it, a read as long as the first: Ctrl-C there printed a
    traceback. One line now, and the session stays where it was."""
    path = _first_open_session(tmp_path, "analysis.agent.jsonl")
    interrupt_at("decode")
    run_cell(shell, "%load_ext tiny_agent_nb", capsys)
    before = path.read_bytes()
    interrupt_at("decode")  # armed again: the claim's read decodes the snapshot
    out = run_cell(shell, "%agent new", capsys)
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert out.count("\n") == 1 and "was interrupted; nothing was moved" in out, out
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == ["analysis.agent.jsonl"]
    moved = run_cell(shell, "%agent new", capsys)  # not interrupted: it goes on
    assert "Kept the previous conversation as analysis.agent.1.jsonl." in moved, moved
    assert (tmp_path / "analysis.agent.1.jsonl").read_bytes() == before
