"""The notebook's side of the file history: a `%%agent` run's write_file keeps the file
before and after in the session's store, and opening a session for writing collects the
blobs nothing in its file names. XDG_STATE_HOME is a temporary directory for the whole
test run (conftest)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.notebook._links import SessionLocation
from tiny_agent_nb.notebook._opening import open_store
from tiny_agent_nb.session import FileStore, HeaderInit, facts, load_session

from helpers.ipython_shell import run, shell
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

__all__ = ["shell"]  # the fixture, from ipython_shell


def test_a_runs_write_is_kept_in_the_sessions_store(
    shell: InteractiveShell,
    server: OpenAIServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_bytes(b"the user's\n")
    run(shell, "%load_ext tiny_agent_nb", capsys)
    call = tool_call("w1", "write_file", {"path": "notes.txt", "content": "the agent's\n"})
    server.enqueue(tool_calls_reply(call), text_reply("done"))
    run(shell, "%%agent\nrewrite notes", capsys)
    assert (tmp_path / "notes.txt").read_bytes() == b"the agent's\n"
    state = load_session(tmp_path / "analysis.agent.jsonl")
    (intent,) = state.tool_intents.values()
    file = intent.arguments["file"]
    assert (file["path"], file["kept"]) == ("notes.txt", True)
    store = FileStore.for_session(state.header.id)
    assert store.get(file["before"]) == b"the user's\n"
    assert store.get(file["after"]) == b"the agent's\n"
    assert file["before"] == "sha256:" + hashlib.sha256(b"the user's\n").hexdigest()


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
