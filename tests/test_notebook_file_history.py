"""The notebook's side of the file history: opening a session for writing collects the
blobs of its store that nothing in the file names. XDG_STATE_HOME is a temporary
directory for the whole test run (conftest)."""

from __future__ import annotations

import os
from pathlib import Path

from tiny_agent_nb.notebook._links import SessionLocation
from tiny_agent_nb.notebook._opening import open_store
from tiny_agent_nb.session import FileStore, HeaderInit, facts


def test_opening_a_session_collects_its_unnamed_blobs(tmp_path: Path) -> None:
    path = tmp_path / "nb.agent.jsonl"
    init = HeaderInit(str(tmp_path), "openrouter", "m", str(tmp_path))
    store = open_store(SessionLocation(path, "explicit"), init, "process")
    files = FileStore.for_session(store.header.id)
    named, orphan = files.put(b"named"), files.put(b"orphan")
    store.commit([facts.user_message(f"keep {named}")])
    store.close()
    for blob in files.directory.iterdir():
        os.utime(blob, (1, 1))
    open_store(SessionLocation(path, "explicit"), init, "process").close()
    assert files.has(named) and not files.has(orphan)
