"""`fork_here`, what `%agent fork` does to the files: the fork takes the session's name
once it is whole, the open session's file is kept byte for byte under its archive name
(the store still writing it there), and a fork that fails leaves the file where it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tiny_agent_nb.notebook import _opening
from tiny_agent_nb.notebook._opening import NotebookError, fork_here, keep_as_archive
from tiny_agent_nb.session import SessionStore, load_session, read_header

from helpers.scenario import complete_run


def test_the_fork_takes_the_name_and_the_file_is_kept_byte_for_byte(
    store: SessionStore, session_path: Path
) -> None:
    complete_run(store, "first")
    complete_run(store, "second")
    before, original = session_path.read_bytes(), store.header.id
    kept, fork_id = fork_here(store, session_path, 1)
    assert kept == session_path.with_name("notebook.agent.1.jsonl")
    assert kept.read_bytes() == before and store.path == kept  # still this store's
    assert read_header(session_path).id == fork_id != original
    assert len(load_session(session_path).operations) == 1


def test_a_refused_fork_moves_nothing(store: SessionStore, session_path: Path) -> None:
    complete_run(store)
    before = sorted(session_path.parent.iterdir())
    with pytest.raises(NotebookError, match="has no run 2"):
        fork_here(store, session_path, 2)
    assert sorted(session_path.parent.iterdir()) == before and store.path == session_path


def test_a_fork_that_cannot_take_the_name_gives_the_file_its_name_back(
    store: SessionStore, session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    complete_run(store)
    before = session_path.read_bytes()

    def refused(source: object, target: object) -> None:  # the fork's publication
        raise FileExistsError(17, "File exists")

    monkeypatch.setattr(os, "link", refused)
    with pytest.raises(NotebookError) as failed:
        fork_here(store, session_path, None)
    monkeypatch.undo()
    assert str(failed.value) == (
        "tiny-agent-nb: no fork was made (File exists); this kernel still writes the "
        "conversation it had."
    )
    assert store.path == session_path and session_path.read_bytes() == before
    assert sorted(p.name for p in session_path.parent.iterdir()) == [session_path.name]
    complete_run(store)  # and goes on writing it


def test_a_file_that_takes_the_name_meanwhile_is_left_and_the_kept_file_named(
    store: SessionStore, session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    complete_run(store)
    before = session_path.read_bytes()

    def keep_then_another_writes(*args: object, **kwargs: object) -> Path:
        kept = keep_as_archive(*args, **kwargs)  # type: ignore[arg-type]
        session_path.write_text("another's")
        return kept

    monkeypatch.setattr(_opening, "keep_as_archive", keep_then_another_writes)
    with pytest.raises(NotebookError) as failed:
        fork_here(store, session_path, None)
    assert str(failed.value).endswith("The conversation is kept as notebook.agent.1.jsonl.")
    assert session_path.read_text() == "another's"
    kept = session_path.with_name("notebook.agent.1.jsonl")
    assert store.path == kept and kept.read_bytes() == before
