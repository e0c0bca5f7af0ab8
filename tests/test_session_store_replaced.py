"""A session file replaced on disk while its writer has it open (docs/session-format.md §6.4).

`git checkout`, a sync client or an editor writes a new file and renames it over the old
one; a user deletes the file, or renames its folder. The writer's descriptor then names a
file nobody reads, and its lock no longer guards the path: each commit checks that the
path still names the file it writes, and is refused (nothing written anywhere) when not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_agent_nb.session import (
    HeaderInit,
    SessionReplacedError,
    SessionState,
    SessionStore,
    load_session,
)
from tiny_agent_nb.session import facts as f


def contents(state: SessionState) -> list[str]:
    return [e.entry.message.content for e in state.entries.values()]  # type: ignore[union-attr]


def init(path: Path) -> HeaderInit:
    return HeaderInit(cwd=str(path.parent), provider="p", model="m", environment_identity="/w")


def renamed_over(path: Path, data: bytes) -> None:
    """What `git checkout` does: a new file beside it, renamed over it."""
    fresh = path.with_name(f".{path.name}.new")
    fresh.write_bytes(data)
    fresh.replace(path)


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    store = SessionStore.open(tmp_path / "s.jsonl", create=init(tmp_path / "s.jsonl"))
    store.commit([f.user_message("before")])
    return store


def test_a_commit_to_a_file_renamed_over_is_refused_and_writes_nothing(
    store: SessionStore, tmp_path: Path
) -> None:
    path = store.path
    old = tmp_path / "old-inode"
    os.link(path, old)  # to look at the file the writer still holds
    held = old.read_bytes()
    renamed_over(path, held)  # an older version checked out: here the very same bytes
    with pytest.raises(SessionReplacedError) as refused:
        store.commit([f.user_message("after")])
    assert f"{path} is no longer the file this writer opened" in str(refused.value)
    assert "another file was renamed over it" in str(refused.value)
    assert path.read_bytes() == held  # the file now at the path: untouched
    assert old.read_bytes() == held  # the line written to the old one was cut back
    assert contents(store.load()) == ["before"]
    with pytest.raises(SessionReplacedError):  # and every later commit too
        store.commit([f.user_message("again")])
    assert store.moved() == "another file was renamed over it"
    store.close()


def test_a_commit_to_a_deleted_file_is_refused(store: SessionStore, tmp_path: Path) -> None:
    old = tmp_path / "old-inode"
    os.link(store.path, old)
    held = old.read_bytes()
    store.path.unlink()
    with pytest.raises(SessionReplacedError, match="deleted, or moved"):
        store.commit([f.user_message("after")])
    assert not store.path.exists()  # not created again either
    assert old.read_bytes() == held
    store.close()


def test_a_commit_after_its_directory_was_renamed_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    store = SessionStore.open(folder / "s.jsonl", create=init(folder / "s.jsonl"))
    store.commit([f.user_message("before")])
    held = (folder / "s.jsonl").read_bytes()
    folder.rename(tmp_path / "renamed")
    with pytest.raises(SessionReplacedError, match="deleted, or moved"):
        store.commit([f.user_message("after")])
    assert (tmp_path / "renamed" / "s.jsonl").read_bytes() == held
    store.close()


def test_a_relative_path_still_names_its_file_after_a_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel's working directory changes (`%cd`): the path was made absolute at open."""
    monkeypatch.chdir(tmp_path)
    store = SessionStore.open("s.jsonl", create=init(tmp_path / "s.jsonl"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    store.commit([f.user_message("after the cd")])
    store.close()
    assert load_session(tmp_path / "s.jsonl").last_seq == 1


SECOND_WRITER = """
import sys
from tiny_agent_nb.session import SessionStore, facts as f
with SessionStore.open(sys.argv[1]) as store:
    store.commit([f.user_message("second")])
    print("committed", flush=True)
    sys.stdin.readline()
    store.commit([f.user_message("second again")])
"""


def test_a_second_writer_of_the_replaced_path_writes_alone(
    store: SessionStore, tmp_path: Path
) -> None:
    """The first writer's lock is on the old file: a second one may open the path, and
    from then on only the second one's lines reach it."""
    renamed_over(store.path, store.path.read_bytes())
    second = subprocess.Popen(
        [sys.executable, "-c", SECOND_WRITER, str(store.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert second.stdin is not None and second.stdout is not None
    assert second.stdout.readline() == "committed\n"  # it holds the path's file now
    with pytest.raises(SessionReplacedError):
        store.commit([f.user_message("first")])
    second.stdin.write("go on\n")
    second.stdin.close()
    assert second.wait(timeout=60) == 0
    store.close()
    assert contents(load_session(store.path)) == ["before", "second", "second again"]


def test_a_file_moved_back_is_written_again(store: SessionStore, tmp_path: Path) -> None:
    """The check is of the path now: it names the writer's file again, and no line was
    lost meanwhile."""
    aside = tmp_path / "aside.jsonl"
    store.path.rename(aside)
    with pytest.raises(SessionReplacedError):
        store.commit([f.user_message("while away")])
    aside.rename(store.path)
    store.commit([f.user_message("back")])
    store.close()
    assert contents(load_session(store.path)) == ["before", "back"]


def test_a_moved_session_is_written_at_its_new_path(tmp_path: Path) -> None:
    """`%agent new` renames the file it holds and goes on writing it there."""
    path, archived = tmp_path / "s.jsonl", tmp_path / "s.1.jsonl"
    store = SessionStore.open(path, create=init(path))
    store.commit([f.user_message("before the move")])
    store.move(archived)
    store.commit([f.user_message("after the move")])
    store.close()
    assert not path.exists()
    assert contents(load_session(archived)) == ["before the move", "after the move"]
