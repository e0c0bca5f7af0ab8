"""A rewind (docs/spec.md §17) against real files and the real loop: the plan, the
restore, conflicts, --force, --undo, and the conversation the next request sends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import (
    AgentLoop,
    LoopConfig,
    carry_out,
    interrupted_rewind,
    operation_numbered,
    plan_rewind,
    undo_target,
)
from tiny_agent_nb.cli import main
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import FileStore, SessionStore, ToolIdentity
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.tools import ToolContext, builtin_registry

from helpers.openai_server import OpenAIServer, text_reply
from helpers.scenario import BASH, Run

WRITE_FILE = ToolIdentity(name="write_file", version="1", source="builtin")
PYTHON = ToolIdentity(name="python", version="1", source="builtin")
SEARCH = ToolIdentity(name="search_issues", version="1", source="mcp:github")


@pytest.fixture
def files(tmp_path: Path) -> FileStore:
    return FileStore.for_session("session", tmp_path / "state")


def write(
    store: SessionStore, files: FileStore, root: Path, run: Run, path: str, data: bytes | None
) -> None:
    """A write_file call as the file history records it (before the effect), then the
    effect on disk; `data` None deletes the file (as bash would: not undoable)."""
    target = root / path
    before = target.read_bytes() if target.exists() else None
    mode = target.stat().st_mode & 0o7777 if target.exists() else None
    call_id = f"c{len(store.load().tool_intents)}"
    if data is None:
        arguments: dict[str, Any] = {"command": f"rm {path}"}
        tool = BASH
    else:
        member = {
            "path": path,
            "before": None if before is None else files.put(before),
            "after": files.put(data),
            "mode": mode,
            "kept": True,
        }
        arguments = {"path": path, "content": "…", "file": member}
        tool = WRITE_FILE
    store.commit(run.attempt())
    store.commit(run.answer(None, [(call_id, tool.name, arguments)]))
    intent = run.intent(call_id, tool, arguments)
    store.commit([intent])
    if data is None:
        target.unlink()
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    store.commit([Run.result(intent, "done")])


def run_writing(
    store: SessionStore, files: FileStore, root: Path, changes: dict[str, bytes | None]
) -> Run:
    run = Run(environment=str(root))
    store.commit(run.start(f"change {', '.join(changes)}"))
    for path, data in changes.items():
        write(store, files, root, run, path, data)
    store.commit(run.attempt())
    store.commit(run.answer("Done."))
    store.commit(run.finish())
    return run


def rewind(
    store: SessionStore, files: FileStore, root: Path, number: int | None, *, force: bool = False
) -> str:
    state = store.load()
    target = undo_target(state) if number is None else operation_numbered(state, number)
    plan = plan_rewind(state, target, files, root, force=force, undo=number is None)
    carry_out(store, plan, files, root)
    return plan.text()


def test_a_rewind_restores_written_created_and_binary_files_byte_exact(
    store: SessionStore, files: FileStore, tmp_path: Path
) -> None:
    root = tmp_path
    (root / "notes.md").write_bytes(b"first\n")
    (root / "notes.md").chmod(0o640)
    (root / "data.bin").write_bytes(bytes(range(256)))
    run_writing(store, files, root, {"notes.md": b"first\nsecond\n"})
    run_writing(
        store,
        files,
        root,
        {"notes.md": b"third\n", "data.bin": b"\x00\xff" * 9, "sub/new.txt": b"new\n"},
    )
    text = rewind(store, files, root, 1)
    assert "notes.md: restore 6 bytes (6 bytes now; +1 -1 lines)" in text
    assert "sub/new.txt: remove it (4 bytes; it was created after that point)" in text
    assert "data.bin: restore 256 bytes (binary; 18 bytes now)" in text
    assert (root / "notes.md").read_bytes() == b"first\n"
    assert (root / "notes.md").stat().st_mode & 0o7777 == 0o640
    assert (root / "data.bin").read_bytes() == bytes(range(256))
    assert not (root / "sub" / "new.txt").exists()
    # --undo: back to what the rewind found.
    rewind(store, files, root, None)
    assert (root / "notes.md").read_bytes() == b"third\n"
    assert (root / "sub" / "new.txt").read_bytes() == b"new\n"
    assert (root / "data.bin").read_bytes() == b"\x00\xff" * 9


def test_a_file_deleted_by_bash_is_named_and_a_users_edit_is_a_conflict(
    store: SessionStore, files: FileStore, tmp_path: Path
) -> None:
    root = tmp_path
    run_writing(store, files, root, {"a.txt": b"agent\n", "b.txt": b"agent b\n"})
    run_writing(store, files, root, {"b.txt": None})
    (root / "a.txt").write_bytes(b"the user's\n")
    text = rewind(store, files, root, 1)
    assert "a.txt: changed since the agent's last change" in text
    assert "bash: rm b.txt" in text
    assert (root / "a.txt").read_bytes() == b"the user's\n"  # never clobbered
    rewind(store, files, root, 1, force=True)
    assert not (root / "a.txt").exists()  # the agent created it: forced, it goes


def test_a_symlink_swapped_in_after_the_write_is_a_conflict_never_followed(
    store: SessionStore, files: FileStore, tmp_path: Path
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep me\n")
    run_writing(store, files, root, {"link.txt": b"agent\n", "d/x.txt": b"x\n", "dir.txt": b"f\n"})
    (root / "dir.txt").unlink()
    (root / "link.txt").unlink()
    (root / "link.txt").symlink_to(outside)
    (root / "d" / "x.txt").unlink()
    (root / "d").rmdir()
    (root / "d").symlink_to(tmp_path)
    (root / "dir.txt").mkdir()  # replaced by a directory after the agent created it
    text = rewind(store, files, root, 1, force=True)
    assert "dir.txt: it became a directory; never written through" in text
    assert (root / "dir.txt").is_dir()
    assert "link.txt: it became a symbolic link; never written through" in text
    assert "d/x.txt: a directory on its path became a symlink or a file" in text
    assert outside.read_bytes() == b"keep me\n"
    assert (root / "link.txt").is_symlink()


def test_the_next_request_after_a_rewind_sends_the_path_only(
    server: OpenAIServer, store: SessionStore, files: FileStore, tmp_path: Path
) -> None:
    config = ProviderConfig(model="test/model", base_url=server.base_url, api_key="sk-test")
    provider = Provider(config)
    tools = builtin_registry().subset(["read_file"])
    loop = AgentLoop(
        store,
        provider,
        tools,
        ToolContext(workspace=tmp_path, namespace={}),
        LoopConfig(config, approval="auto", system_prompt="sys"),
    )

    def sent(index: int) -> list[str]:
        return [m["content"] for m in server.requests[index].body["messages"][1:]]

    try:
        for n in (1, 2, 3):
            server.enqueue(text_reply(f"answer {n}"))
            loop.run(f"prompt {n}")
        rewind(store, files, tmp_path, 2)
        server.enqueue(text_reply("answer 4"))
        loop.run("prompt 4")
        assert sent(3) == ["prompt 1", "answer 1", "prompt 4"]
        rewind(store, files, tmp_path, None)  # --undo: runs 2 and 3 come back
        server.enqueue(text_reply("answer 5"))
        loop.run("prompt 5")
        assert sent(4) == [
            *("prompt 1", "answer 1", "prompt 2", "answer 2", "prompt 3", "answer 3"),
            "prompt 5",
        ]
    finally:
        loop.close()
        provider.close()


CHILD = Path(__file__).parent / "children" / "rewind_kill.py"


def test_a_rewind_killed_between_a_record_and_its_replace_is_reported_and_finished(
    session_path: Path, store: SessionStore, files: FileStore, tmp_path: Path
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    run_writing(store, files, root, {"a.txt": b"a1\n", "b.txt": b"b1\n", "c.txt": b"c1\n"})
    run_writing(store, files, root, {"a.txt": b"a2\n", "b.txt": b"b2\n", "c.txt": b"c2\n"})
    store.close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run(
        [sys.executable, str(CHILD), str(session_path), str(root), str(tmp_path / "state"), "2"],
        env=env,
        capture_output=True,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    # Every file wholly old or new: a.txt restored, b.txt recorded but not replaced.
    assert [(root / n).read_bytes() for n in ("a.txt", "b.txt", "c.txt")] == [
        b"a1\n",
        b"b2\n",
        b"c2\n",
    ]
    with SessionStore.open(session_path) as again:
        loop = AgentLoop(
            again,
            Provider(ProviderConfig(model="m", base_url="http://127.0.0.1:9", api_key="k")),
            builtin_registry().subset(["read_file"]),
            ToolContext(workspace=root, namespace={}),
            LoopConfig(ProviderConfig(model="m", base_url="http://127.0.0.1:9", api_key="k")),
        )
        recovery = loop.recover()
        loop.close()
        assert recovery is not None
        state = again.load()
        assert state.operations[recovery.operation_id].status == "interrupted"
        report = interrupted_rewind(state, recovery.operation_id, root)
        assert report[1:-1] == ["  restored: a.txt", "  not restored: b.txt"]
        assert report[-1] == "`%agent rewind 2` finishes it (what is restored stays)."
        rewind(again, files, root, 2)
    assert [(root / n).read_bytes() for n in ("a.txt", "b.txt", "c.txt")] == [
        b"a1\n",
        b"b1\n",
        b"c1\n",
    ]


def test_the_command_line_prints_the_plan_and_rewinds_only_with_yes(
    session_path: Path,
    store: SessionStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    # The workspace is the session's recorded one (tmp_path); its store is the default.
    default = FileStore.for_session(store.header.id)
    run_writing(store, default, tmp_path, {"out.txt": b"one\n"})
    store.close()
    assert main(["rewind", str(session_path), "1"]) == 0
    out = capsys.readouterr().out
    assert "out.txt: remove it (4 bytes; it was created after that point)" in out
    assert "Nothing has changed: add --yes to carry it out." in out
    assert (tmp_path / "out.txt").exists()
    assert main(["rewind", str(session_path), "1", "--yes"]) == 0
    assert "restored out.txt" in capsys.readouterr().out
    assert not (tmp_path / "out.txt").exists()
    assert main(["rewind", str(session_path), "--undo", "--yes"]) == 0
    assert (tmp_path / "out.txt").read_bytes() == b"one\n"
    capsys.readouterr()
    assert main(["timeline", str(session_path)]) == 0
    timeline = capsys.readouterr().out
    assert "rewind ⟲ rewind to before run 1 (files and conversation)" in timeline
    assert "rewind ⟲ rewind to before run 2 (files and conversation)" in timeline
    rewinds = [line for line in timeline.splitlines() if "⟲ rewind to before" in line]
    assert len(rewinds) == 2
    assert all(line.endswith("[no model request]") for line in rewinds), rewinds
    assert main(["rewind", str(session_path), "9"]) == 2
    assert "there is no run 9" in capsys.readouterr().err


def test_a_rewind_across_a_compaction_sends_the_summary_only_on_its_path(
    server: OpenAIServer, store: SessionStore, files: FileStore, tmp_path: Path
) -> None:
    config = ProviderConfig(model="test/model", base_url=server.base_url, api_key="sk-test")
    provider = Provider(config)
    loop = AgentLoop(
        store,
        provider,
        builtin_registry().subset(["read_file"]),
        ToolContext(workspace=tmp_path, namespace={}),
        LoopConfig(config, approval="auto", system_prompt="sys"),
    )

    def sent() -> str:
        return json.dumps(server.requests[-1].body["messages"])

    def ask(prompt: str) -> None:
        server.enqueue(text_reply(f"answer to {prompt}"))
        loop.run(prompt)

    try:
        for n in (1, 2, 3):
            ask(f"prompt {n}")
        state = store.load()
        run2_last = state.entry_path()[3]  # prompt 1, answer 1, prompt 2, answer 2
        store.commit([f.NewFact(f.CompactionEntry(summary="SUMMARY", throughEntryId=run2_last))])
        ask("prompt 4")
        assert "SUMMARY" in sent() and "prompt 2" not in sent() and "prompt 3" in sent()
        rewind(store, files, tmp_path, 4)  # before run 4: the compaction stays on the path
        ask("prompt 5")
        assert "SUMMARY" in sent() and "prompt 4" not in sent() and "prompt 3" in sent()
        rewind(store, files, tmp_path, 2)  # before run 2: the compaction is left behind
        ask("prompt 6")
        assert "SUMMARY" not in sent() and "prompt 2" not in sent() and "prompt 1" in sent()
        # A cut before the one left behind: the previous compaction on the path is none.
        first = store.load().entry_path()[0]
        store.commit([f.NewFact(f.CompactionEntry(summary="AGAIN", throughEntryId=first))])
        ask("prompt 7")
        assert "AGAIN" in sent() and '"prompt 1"' not in sent() and "prompt 6" in sent()
    finally:
        loop.close()
        provider.close()


def test_the_plan_names_python_definitions_and_what_the_store_did_not_keep(
    store: SessionStore, files: FileStore, tmp_path: Path
) -> None:
    run = Run(environment=str(tmp_path))
    store.commit(run.start("define and write big"))
    store.commit(run.attempt())
    code = "import math\nrate = 0.5\ndef grow(x):\n    return x * rate"
    big = {"path": "big.csv", "before": None, "after": "sha256:" + "cd" * 32, "mode": None}
    big |= {"kept": False, "why": "the file is 20000000 bytes, past the per-file cap"}
    calls = [
        ("p1", "python", {"code": code}),
        ("w1", "write_file", {"path": "big.csv", "content": "…", "file": big}),
        ("m1", "github__search_issues", {"query": "rewind"}),
    ]
    store.commit(run.answer(None, calls))
    tools = {"python": PYTHON, "write_file": WRITE_FILE, "github__search_issues": SEARCH}
    for call_id, name, arguments in calls:
        intent = run.intent(call_id, tools[name], arguments)
        store.commit([intent, Run.result(intent, "done")])
    (tmp_path / "big.csv").write_bytes(b"not kept")
    store.commit(run.attempt())
    store.commit(run.answer("Done."))
    store.commit(run.finish())
    state = store.load()
    plan = plan_rewind(state, operation_numbered(state, 1), files, tmp_path)
    text = plan.text()
    assert "python: import math" in text
    assert 'mcp:github search_issues: {"query": "rewind"}' in text
    assert "kernel names python calls defined (they stay): math, rate, grow" in text
    assert "cannot be restored (1):\n    big.csv: the file is 20000000 bytes" in text
    carry_out(store, plan, files, tmp_path)
    assert (tmp_path / "big.csv").read_bytes() == b"not kept"
