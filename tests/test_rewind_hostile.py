"""A rewind (docs/spec.md §16, §17) attacked: paths forged into a crafted session file,
files swapped for a FIFO or made unreadable, the file history's caps reached, --force over
a file whose content cannot be kept, a store directory that is a symlink. Real files, the
real write_file tool."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_agent_rewind import rewind

from tiny_agent_nb.agent import AgentLoop, LoopConfig, operation_numbered, plan_rewind
from tiny_agent_nb.cli import main
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import FileStore, SessionStore, ToolIdentity, fork_session
from tiny_agent_nb.tools import ToolContext, ToolError, builtin_registry

from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.scenario import Run

WRITE_FILE = ToolIdentity(name="write_file", version="1", source="builtin")


def agent_writes(
    store: SessionStore, files: FileStore, root: Path, writes: dict[str, bytes]
) -> None:
    """One run whose write_file calls go through the real tool: prepare (the file history),
    the intent, execute."""
    tool = builtin_registry().get("write_file")
    assert tool is not None
    context = ToolContext(workspace=root, namespace={}, file_store=files)
    run = Run(environment=str(root))
    store.commit(run.start("write"))
    for n, (path, data) in enumerate(writes.items()):
        arguments = tool.prepare({"path": path, "content": data.decode()}, context)
        store.commit(run.attempt())
        store.commit(run.answer(None, [(f"w{n}", "write_file", arguments)]))
        intent = run.intent(f"w{n}", WRITE_FILE, arguments)
        store.commit([intent])
        tool.run(arguments, context)
        store.commit([Run.result(intent, "done")])
    store.commit(run.attempt())
    store.commit(run.answer("Done."))
    store.commit(run.finish())


def crafted_run(store: SessionStore, root: Path, member: dict[str, Any]) -> None:
    """A run whose write_file call's "file" member is `member`, as a crafted file says."""
    run = Run(environment=str(root))
    store.commit(run.start("forged"))
    store.commit(run.attempt())
    arguments = {"path": "x", "content": "…", "file": {"mode": None, **member}}
    store.commit(run.answer(None, [("w", "write_file", arguments)]))
    intent = run.intent("w", WRITE_FILE, arguments)
    store.commit([intent, Run.result(intent, "done")])
    store.commit(run.attempt())
    store.commit(run.answer("Done."))
    store.commit(run.finish())


ROOT = os.geteuid() == 0  # permission bits do not stop root


@pytest.mark.skipif(ROOT, reason="root reads a file whatever its mode")
def test_a_fifo_or_an_unreadable_file_in_place_of_a_restored_one_is_a_conflict(
    store: SessionStore, tmp_path: Path
) -> None:
    files = FileStore.for_session("session", tmp_path / "state")
    root = tmp_path / "work"
    (root / "locked").mkdir(parents=True)
    agent_writes(store, files, root, {"fifo": b"a\n", "mine": b"b\n", "locked/c": b"c\n"})
    (root / "fifo").unlink()
    os.mkfifo(root / "fifo")  # opened, it would block the kernel
    (root / "mine").chmod(0o000)
    (root / "locked").chmod(0o000)
    try:
        text = rewind(store, files, root, 1, force=True)
        assert "fifo: it is no regular file now; never written through" in text
        assert "mine: it cannot be read: Permission denied; never written through" in text
        assert "locked/c: it cannot be reached: Permission denied; never written through" in text
    finally:
        (root / "locked").chmod(0o700)
        (root / "mine").chmod(0o600)
    assert (root / "fifo").is_fifo()
    assert (root / "mine").read_bytes() == b"b\n"
    assert (root / "locked" / "c").read_bytes() == b"c\n"


FORGED = ["../outside.txt", "{outside}", "a/../../outside.txt", "a\0b"]


@pytest.mark.parametrize("forged", FORGED)
def test_a_path_forged_outside_the_workspace_is_never_touched(
    store: SessionStore, tmp_path: Path, forged: str
) -> None:
    files = FileStore.for_session("session", tmp_path / "state")
    root = tmp_path / "work"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep me\n")
    forged = forged.format(outside=outside)
    after = files.put(b"keep me\n")
    crafted_run(store, root, {"path": forged, "before": None, "after": after, "kept": True})
    text = rewind(store, files, root, 1, force=True)
    assert "not a path inside the workspace; never written through" in text
    assert outside.read_bytes() == b"keep me\n"


def test_past_a_cap_the_plan_says_cannot_be_restored(store: SessionStore, tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    (root / "big.txt").write_bytes(b"0123456789" * 2)
    files = FileStore.for_session("session", tmp_path / "state", max_file=16, max_session=15)
    agent_writes(store, files, root, {"big.txt": b"small\n", "a.txt": b"a" * 10})
    agent_writes(store, files, root, {"b.txt": b"b" * 10})  # 10 kept + 10: past 15
    state = store.load()
    text = plan_rewind(state, operation_numbered(state, 1), files, root).text()
    assert "big.txt: the file was larger than the per-file cap of 16 bytes" in text
    assert "b.txt: the session's file history would pass its cap of 15 bytes" in text
    assert "a.txt: remove it" in text  # kept: within both caps


def test_force_over_a_change_the_store_cannot_keep_overwrites_nothing(
    store: SessionStore, tmp_path: Path
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    files = FileStore.for_session("session", tmp_path / "state", max_file=16)
    agent_writes(store, files, root, {"notes.txt": b"agent\n"})
    (root / "notes.txt").write_bytes(b"the user's long notes\n")  # past the cap of 16
    text = rewind(store, files, root, 1, force=True)
    assert "notes.txt: changed since the agent's last change" in text
    assert "its content now cannot be kept (the file is 22 bytes" in text
    assert (root / "notes.txt").read_bytes() == b"the user's long notes\n"
    assert files.size() == len(b"agent\n")  # nothing stored past the cap


@pytest.mark.skipif(ROOT, reason="root reads a file whatever its mode")
def test_a_write_to_a_file_the_agent_cannot_read_is_refused(
    store: SessionStore, tmp_path: Path
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    (root / "w.txt").write_bytes(b"write-only\n")
    (root / "w.txt").chmod(0o200)
    files = FileStore.for_session("session", tmp_path / "state")
    with pytest.raises(ToolError, match="ermission denied"):
        agent_writes(store, files, root, {"w.txt": b"agent\n"})
    (root / "w.txt").chmod(0o600)
    assert (root / "w.txt").read_bytes() == b"write-only\n"


def test_a_store_directory_that_is_a_symlink_is_never_used(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    blob = elsewhere / ("ab" * 32)
    blob.write_bytes(b"someone's\n")
    os.utime(blob, (0, 0))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "session").symlink_to(elsewhere)
    files = FileStore.for_session("session", tmp_path / "state")
    with pytest.raises(Exception, match="not a directory"):
        files.put(b"x")
    assert files.collect(lambda: b"", older_than=0) == 0
    assert blob.exists()


def test_a_fifo_a_name_too_long_or_a_missing_workspace_is_said_not_raised(
    store: SessionStore, tmp_path: Path
) -> None:
    files = FileStore.for_session("session", tmp_path / "state")
    root = tmp_path / "work"
    root.mkdir()
    agent_writes(store, files, root, {"fifo": b"a\n"})
    (root / "fifo").unlink()
    os.mkfifo(root / "fifo")  # opened, it would block the kernel
    after = files.put(b"x\n")
    for path in ("n" * 300, "d" * 300 + "/c"):  # forged: no file system takes such a name
        crafted_run(store, root, {"path": path, "before": None, "after": after, "kept": True})
    text = rewind(store, files, root, 1, force=True)
    assert "fifo: it is no regular file now; never written through" in text
    assert f"{'n' * 300}: it cannot be read: File name too long" in text
    assert "/c: it cannot be reached: File name too long" in text
    assert (root / "fifo").is_fifo()
    root.rename(tmp_path / "moved")
    text = rewind(store, files, root, 1, force=True)
    assert f"fifo: the workspace {root} cannot be reached: No such file or directory" in text


def test_digests_of_another_sessions_blobs_are_not_this_sessions(
    store: SessionStore, tmp_path: Path
) -> None:
    """A crafted file naming blobs only another session's store holds restores nothing
    from it: each session reads its own store alone."""
    root = tmp_path / "work"
    root.mkdir()
    other = FileStore.for_session("other", tmp_path / "state")
    secret = other.put(b"another session's secret\n")
    files = FileStore.for_session("session", tmp_path / "state")
    after = files.put(b"x\n")
    (root / "x.txt").write_bytes(b"x\n")
    crafted_run(store, root, {"path": "x.txt", "before": secret, "after": after, "kept": True})
    text = rewind(store, files, root, 1, force=True)
    assert "x.txt: its earlier content is not in the session's file store" in text
    assert (root / "x.txt").read_bytes() == b"x\n"


def test_a_second_rewind_while_a_kernel_holds_the_session_is_refused(
    store: SessionStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    files = FileStore.for_session("session", tmp_path / "state")
    agent_writes(store, files, root, {"a.txt": b"agent\n"})
    assert main(["rewind", str(store.path), "1", "--yes"]) != 0  # `store` holds the lock
    assert "Use `%agent rewind` in that kernel." in capsys.readouterr().err
    assert (root / "a.txt").read_bytes() == b"agent\n"
    assert [op.kind for op in store.load().operations.values()] == ["run"]


def test_a_rewind_inside_a_fork_restores_from_the_blobs_it_adopted(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_bytes(b"mine\n")
    files = FileStore.for_session(store.load().header.id)
    agent_writes(store, files, root, {"a.txt": b"agent\n", "new.txt": b"new\n"})
    store.close()
    original = store.path.read_bytes()
    fork = tmp_path / "fork.agent.jsonl"
    header = fork_session(store.path, fork)
    shutil.rmtree(files.directory)  # the original's store gone: the fork has its own
    with SessionStore.open(fork) as forked:
        rewind(forked, FileStore.for_session(header.id), root, 1)
    assert (root / "a.txt").read_bytes() == b"mine\n"
    assert not (root / "new.txt").exists()
    assert store.path.read_bytes() == original


def test_a_file_whose_name_is_as_long_as_the_file_system_takes_is_restored(
    store: SessionStore, tmp_path: Path
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    name = "n" * 250  # its temporary file's name is cut to fit too
    (root / name).write_bytes(b"mine\n")
    files = FileStore.for_session("session", tmp_path / "state")
    agent_writes(store, files, root, {name: b"agent\n"})
    rewind(store, files, root, 1)
    assert (root / name).read_bytes() == b"mine\n"
    assert [p.name for p in root.iterdir()] == [name]


def test_a_damaged_blob_or_a_forged_mode_is_said_in_the_plan_not_raised(
    store: SessionStore, tmp_path: Path
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_bytes(b"mine\n")
    files = FileStore.for_session("session", tmp_path / "state")
    agent_writes(store, files, root, {"a.txt": b"agent\n"})
    blob = files.directory / files.put(b"mine\n").removeprefix("sha256:")
    blob.write_bytes(b"rot\n")  # damaged on disk since
    after = files.put(b"b\n")
    (root / "b.txt").write_bytes(b"b\n")
    before = files.put(b"was\n")
    member = {"path": "b.txt", "before": before, "after": after, "mode": 1 << 40, "kept": True}
    crafted_run(store, root, member)
    text = rewind(store, files, root, 1)
    assert "a.txt: " in text and "is damaged" in text
    assert (root / "a.txt").read_bytes() == b"agent\n"
    assert (root / "b.txt").read_bytes() == b"was\n"  # the forged mode ignored
    assert (root / "b.txt").stat().st_mode & 0o7777 == 0o644


def test_a_file_member_a_hostile_model_sends_or_a_refused_edit_never_steers_a_rewind(
    server: OpenAIServer, store: SessionStore, tmp_path: Path
) -> None:
    """The model forges a "file" member saying the user's file was created by it (its
    digest read first) into calls that are refused before they run: invalid arguments, a
    tool this kernel lacks. And an edit_file refused (old_string not found) keeps no
    history but wrote nothing: the file stays restorable."""
    root = tmp_path / "work"
    root.mkdir()
    (root / "precious.txt").write_bytes(b"the user's\n")
    (root / "notes.txt").write_bytes(b"one\n")
    files = FileStore.for_session("session", tmp_path / "state")
    digest = files.put(b"the user's\n")
    forged = {"path": "precious.txt", "before": None, "after": digest, "kept": True}
    server.enqueue(
        tool_calls_reply(
            tool_call("c1", "write_file", {"path": "precious.txt", "content": 5, "file": forged}),
            tool_call("c2", "delete_file", {"path": "precious.txt", "file": forged}),
            tool_call(
                "c3", "edit_file", {"path": "notes.txt", "old_string": "x", "new_string": "y"}
            ),
            tool_call("c4", "write_file", {"path": "notes.txt", "content": "two\n"}),
        ),
        text_reply("Done."),
    )
    config = ProviderConfig(model="test/model", base_url=server.base_url, api_key="sk-test")
    provider = Provider(config)
    context = ToolContext(workspace=root, namespace={}, file_store=files)
    tools = builtin_registry().subset(["write_file", "edit_file"])
    loop = AgentLoop(store, provider, tools, context, LoopConfig(config, approval="auto"))
    try:
        loop.run("go")
    finally:
        loop.close()
        provider.close()
    assert (root / "notes.txt").read_bytes() == b"two\n"
    text = rewind(store, files, root, 1, force=True)
    assert "precious" not in text
    assert (root / "precious.txt").read_bytes() == b"the user's\n"
    assert "notes.txt: restore 4 bytes" in text
    assert (root / "notes.txt").read_bytes() == b"one\n"


@pytest.mark.parametrize("name", ["line\nbreak.txt", "esc\x1b[31m.txt", "back\\slash.txt", "é.txt"])
def test_a_file_whose_name_the_model_is_shown_escaped_is_the_one_restored(
    store: SessionStore, tmp_path: Path, name: str
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    (root / name).write_bytes(b"mine\n")
    files = FileStore.for_session("session", tmp_path / "state")
    agent_writes(store, files, root, {name: b"agent\n", f"new {name}": b"new\n"})
    rewind(store, files, root, 1)
    assert sorted(p.name for p in root.iterdir()) == [name]
    assert (root / name).read_bytes() == b"mine\n"
