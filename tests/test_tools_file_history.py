"""File history: write_file and edit_file keep the file before and after in the session's
file store and record both digests in their intent; they write only over what they read.
Real files in temporary directories."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import AgentLoop, LoopConfig
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import FileStore, HeaderInit, SessionStore, load_session
from tiny_agent_nb.tools import ToolContext, ToolOutput, builtin_registry
from tiny_agent_nb.tools._writing import CHANGED

from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

SESSION = "0190b2a1-7c3e-7d41-8a2b-1234567890ab"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return Path(os.path.realpath(root))


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore.for_session(SESSION, tmp_path / "state")


@pytest.fixture
def context(workspace: Path, store: FileStore) -> ToolContext:
    return ToolContext(workspace=workspace, file_store=store)


def prepared(context: ToolContext, name: str, **arguments: Any) -> dict[str, Any]:
    """The arguments as the loop records them: effective, then prepared."""
    tool = builtin_registry().get(name)
    assert tool is not None
    return tool.prepare(tool.effective_arguments(arguments), context)


def run(context: ToolContext, name: str, arguments: dict[str, Any]) -> ToolOutput:
    tool = builtin_registry().get(name)
    assert tool is not None
    return tool.run(arguments, context)


def test_write_file_keeps_a_binary_before_image_and_the_mode(
    workspace: Path, context: ToolContext, store: FileStore
) -> None:
    old = b"\x00\x01\xffbinary\r\n"
    (workspace / "data.bin").write_bytes(old)
    (workspace / "data.bin").chmod(0o751)
    arguments = prepared(context, "write_file", path="data.bin", content="text now\n")
    assert arguments["file"] == {
        "path": "data.bin",
        "before": _digest(old),
        "after": _digest(b"text now\n"),
        "mode": 0o751,
        "kept": True,
    }
    assert run(context, "write_file", arguments) == ToolOutput("overwrote data.bin: wrote 9 bytes")
    assert (workspace / "data.bin").read_bytes() == b"text now\n"
    assert store.get(_digest(old)) == old
    assert store.get(_digest(b"text now\n")) == b"text now\n"


def test_a_created_file_records_no_before(workspace: Path, context: ToolContext) -> None:
    arguments = prepared(context, "write_file", path="new/dir/a.txt", content="hi")
    assert arguments["file"]["before"] is None and arguments["file"]["mode"] is None
    assert not (workspace / "new").exists()  # prepare changes nothing
    assert run(context, "write_file", arguments).content == "created new/dir/a.txt: wrote 2 bytes"
    assert (workspace / "new" / "dir" / "a.txt").read_text() == "hi"


def test_edit_file_keeps_text_before_and_after(
    workspace: Path, context: ToolContext, store: FileStore
) -> None:
    (workspace / "a.py").write_text("x = 1\ny = 2\n")
    arguments = prepared(context, "edit_file", path="a.py", old_string="y = 2", new_string="y = 3")
    file = arguments["file"]
    assert (file["before"], file["after"], file["kept"]) == (
        _digest(b"x = 1\ny = 2\n"),
        _digest(b"x = 1\ny = 3\n"),
        True,
    )
    assert store.get(file["before"]) == b"x = 1\ny = 2\n"
    out = run(context, "edit_file", arguments)
    assert out.content == "edited a.py: replaced 1 occurrence at line 2"
    assert (workspace / "a.py").read_text() == "x = 1\ny = 3\n"


def test_an_ambiguous_edit_is_refused_before_the_intent(
    workspace: Path, context: ToolContext, store: FileStore
) -> None:
    (workspace / "a.py").write_text("x\nx\n")
    tool = builtin_registry().get("edit_file")
    assert tool is not None
    with pytest.raises(Exception, match="found 2 times"):
        tool.prepare({"path": "a.py", "old_string": "x", "new_string": "y"}, context)
    assert store.size() == 0


@pytest.mark.parametrize("change", ["edited", "deleted", "created"])
def test_a_file_changed_between_prepare_and_execute_is_not_written(
    workspace: Path, context: ToolContext, change: str
) -> None:
    target = workspace / "a.txt"
    if change != "created":
        target.write_text("as read\n")
    arguments = prepared(context, "write_file", path="a.txt", content="agent's\n")
    if change == "edited":
        target.write_text("the user's edit\n")
    elif change == "deleted":
        target.unlink()
    else:
        target.write_text("made meanwhile\n")
    out = run(context, "write_file", arguments)
    assert out.is_error
    assert out.content == f"a.txt: {CHANGED}"
    expected = {"edited": "the user's edit\n", "created": "made meanwhile\n"}.get(change)
    assert (target.read_text() if target.exists() else None) == expected


def test_a_symlink_swapped_in_after_prepare_is_not_followed(
    workspace: Path, context: ToolContext, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not the agent's\n")
    (workspace / "a.txt").write_text("as read\n")
    arguments = prepared(context, "edit_file", path="a.txt", old_string="as", new_string="was")
    (workspace / "a.txt").unlink()
    (workspace / "a.txt").symlink_to(outside)
    out = run(context, "edit_file", arguments)
    assert out.is_error
    assert outside.read_text() == "not the agent's\n"
    assert (workspace / "a.txt").is_symlink()


def test_a_symlink_leading_outside_is_refused_before_anything_is_kept(
    workspace: Path, context: ToolContext, store: FileStore, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret\n")
    (workspace / "link.txt").symlink_to(outside)
    tool = builtin_registry().get("write_file")
    assert tool is not None
    with pytest.raises(Exception, match="outside the workspace"):
        tool.prepare({"path": "link.txt", "content": "x"}, context)
    assert store.size() == 0 and outside.read_text() == "secret\n"


def test_past_a_cap_the_write_happens_and_is_recorded_not_kept(
    workspace: Path, tmp_path: Path
) -> None:
    store = FileStore.for_session(SESSION, tmp_path / "capped", max_file=8, max_session=20)
    context = ToolContext(workspace=workspace, file_store=store)
    (workspace / "big.txt").write_text("0123456789\n")
    arguments = prepared(context, "write_file", path="big.txt", content="small")
    assert arguments["file"]["kept"] is False
    assert "per-file cap of 8" in arguments["file"]["why"]
    assert arguments["file"]["before"] == _digest(b"0123456789\n")  # hashed, not held
    assert run(context, "write_file", arguments).content == "overwrote big.txt: wrote 5 bytes"
    assert (workspace / "big.txt").read_text() == "small"
    assert store.size() == 0
    # the session cap: what is kept counts, and a change past it is not kept
    for i in range(3):
        arguments = prepared(context, "write_file", path=f"f{i}.txt", content=f"{i}" * 8)
        assert not run(context, "write_file", arguments).is_error
    assert [arguments["file"]["kept"], store.size()] == [False, 16]
    assert "cap of 20 bytes" in arguments["file"]["why"]
    assert (workspace / "f2.txt").read_text() == "22222222"


def test_without_a_store_nothing_is_kept_and_the_write_happens(workspace: Path) -> None:
    context = ToolContext(workspace=workspace)
    arguments = prepared(context, "write_file", path="a.txt", content="x")
    assert arguments["file"]["kept"] is False and "no file store" in arguments["file"]["why"]
    assert not run(context, "write_file", arguments).is_error
    assert (workspace / "a.txt").read_text() == "x"


def test_blobs_are_0600_in_a_0700_directory(
    workspace: Path, context: ToolContext, store: FileStore
) -> None:
    (workspace / "a.txt").write_text("before\n")
    prepared(context, "write_file", path="a.txt", content="after\n")
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    blobs = list(store.directory.iterdir())
    assert len(blobs) == 2
    assert {stat.S_IMODE(b.stat().st_mode) for b in blobs} == {0o600}


def test_a_model_sent_file_is_dropped_and_the_intent_records_the_disk(
    server: OpenAIServer, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "a.txt").write_text("old\n")
    forged = {"path": "a.txt", "before": None, "after": _digest(b"x"), "mode": 0, "kept": True}
    server.enqueue(
        tool_calls_reply(
            tool_call("w1", "write_file", {"path": "a.txt", "content": "new\n", "file": forged})
        )
    )
    server.enqueue(text_reply("done"))
    config = ProviderConfig(model="test/model", base_url=server.base_url, api_key="k")
    path = tmp_path / "nb.agent.jsonl"
    init = HeaderInit(str(workspace), "openrouter", "test/model", str(workspace))
    with SessionStore.open(path, create=init) as session, Provider(config) as provider:
        files = FileStore.for_session(session.header.id, tmp_path / "state")
        context = ToolContext(workspace=workspace, file_store=files)
        settings = LoopConfig(config, approval="auto")
        loop = AgentLoop(session, provider, builtin_registry(), context, settings)
        assert loop.run("write it").outcome == "completed"
        loop.close()
    (intent,) = load_session(path).tool_intents.values()
    assert intent.arguments["file"] == {
        "path": "a.txt",
        "before": _digest(b"old\n"),
        "after": _digest(b"new\n"),
        "mode": stat.S_IMODE((workspace / "a.txt").stat().st_mode),
        "kept": True,
    }
    assert files.get(_digest(b"old\n")) == b"old\n"
    assert (workspace / "a.txt").read_text() == "new\n"


def test_a_symlink_inside_the_workspace_is_recorded_as_the_file_it_names(
    workspace: Path, context: ToolContext
) -> None:
    (workspace / "real.txt").write_text("real\n")
    (workspace / "alias.txt").symlink_to("real.txt")
    arguments = prepared(context, "write_file", path="alias.txt", content="new\n")
    assert arguments["file"]["path"] == "real.txt"
    assert not run(context, "write_file", arguments).is_error
    assert (workspace / "alias.txt").is_symlink()
    assert (workspace / "real.txt").read_text() == "new\n"


def test_a_file_replaced_by_a_directory_is_not_touched(
    workspace: Path, context: ToolContext
) -> None:
    (workspace / "a.txt").write_text("as read\n")
    arguments = prepared(context, "write_file", path="a.txt", content="x")
    (workspace / "a.txt").unlink()
    (workspace / "a.txt").mkdir()
    out = run(context, "write_file", arguments)
    assert out.is_error and "is a directory" in out.content
    assert (workspace / "a.txt").is_dir()
