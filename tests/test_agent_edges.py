"""An agent process at the edge of what it can record, each in a real child process
(tests/children/loop_edge.py): the disk fills up during a run, and the user presses
Ctrl-C (a real SIGINT) while a new process replays a read during recovery."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tiny_agent_nb.agent import INTERRUPTED_RESULT, AgentLoop, LoopConfig
from tiny_agent_nb.agent._planner import REPLAY_CANCELLED_RESULT
from tiny_agent_nb.provider import ProviderConfig
from tiny_agent_nb.session import (
    HeaderInit,
    SessionStore,
    ToolIdentity,
    ToolResultEntry,
    load_session,
)
from tiny_agent_nb.tools import ToolContext, builtin_registry

from children.loop_edge import FILL_THE_DISK, recover, with_waiting_read
from helpers.crash_children import start_child
from helpers.openai_server import OpenAIServer, tool_call, tool_calls_reply
from helpers.scenario import BASH, READ_FILE, Run

TIMEOUT_S = 120.0  # a child importing the notebook layer took over 30 s at load 26
WAITING_READ = ToolIdentity(name="waiting_read", version="1", source="builtin")


def child(mode: str, session: Path, workspace: Path, *more: str) -> subprocess.Popen[str]:
    return start_child("loop_edge.py", mode, str(session), str(workspace), *more)


def test_a_run_on_a_full_disk_says_it_could_not_be_closed_and_the_next_load_settles_it(
    tmp_path: Path,
) -> None:
    session = tmp_path / "nb.agent.jsonl"
    proc = child("full-disk", session, tmp_path)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    seen = json.loads(out)
    assert seen["error"] == "AgentError", seen
    assert "could not be recorded in nb.agent.jsonl" in seen["message"]
    assert "free space" in seen["message"]
    # The refused failure commit, and before it the refused result commit: both told.
    assert seen["causes"][0] == "AgentError"
    assert seen["causes"].count("SessionWriteError") == 2, seen

    state = load_session(session)
    assert state.torn_tail_bytes == 0 and state.open_operation is not None
    (intent,) = state.tool_intents.values()
    assert (intent.tool.name, intent.status) == ("python", "pending")
    before = session.read_bytes()
    proc = child("open-full-disk", session, tmp_path)  # a new kernel, the disk still full
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    seen = json.loads(out)
    assert (seen["error"], seen["store"]) == ("NotebookError", False), seen
    # This kernel's record is the first write refused (before recovery writes anything).
    assert "could not be recorded in it" in seen["message"], seen
    assert "free space" in seen["message"] and "%agent session" in seen["message"], seen
    assert session.read_bytes() == before

    with SessionStore.open(session) as store:  # the next kernel, on a disk with room
        loop = AgentLoop(
            store,
            None,  # type: ignore[arg-type]  # recovery asks no model
            builtin_registry(),
            ToolContext(workspace=tmp_path.resolve()),
            LoopConfig(ProviderConfig("test/model"), approval="auto"),
        )
        assert loop.recover() is not None
        loop.close()
    state = load_session(session)
    assert state.open_operation is None
    assert [i.status for i in state.tool_intents.values()] == ["interrupted"]


def test_a_notebook_cell_on_a_full_disk_ends_with_one_readable_error(
    tmp_path: Path, server: OpenAIServer
) -> None:
    session = tmp_path / "nb.agent.jsonl"
    code = FILL_THE_DISK.format(session=str(session))
    server.enqueue(tool_calls_reply(tool_call("p1", "python", {"code": code})))
    proc = child("notebook-full-disk", session, tmp_path, server.base_url)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    seen = json.loads(out)
    assert seen["error"] == "NotebookError", seen
    assert seen["message"].startswith("tiny-agent-nb: closing operation")
    assert "could not be recorded" in seen["message"] and "free space" in seen["message"]
    assert load_session(session).open_operation is not None  # for the next load to settle


@pytest.mark.parametrize(
    ("mode", "says", "then"),
    [
        # AgentLoop.recover lets the KeyboardInterrupt out; then finds nothing open.
        ("recover", "interrupted\n", "report null\n"),
        # %load_ext reports it instead; then shows the run as interrupted, nothing to recover.
        ("notebook-recover", "Loading was interrupted", "`%agent resume` continues"),
    ],
)
def test_ctrl_c_during_a_replay_at_load_settles_the_run_and_a_second_load_changes_nothing(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    mode: str,
    says: str,
    then: str,
) -> None:
    workspace = (tmp_path / "work").resolve()
    workspace.mkdir()
    (workspace / "README.md").write_text("# Demo\n")
    session = tmp_path / "nb.agent.jsonl"
    env = str(workspace)
    init = HeaderInit(cwd=env, provider="openrouter", model="test/model", environment_identity=env)
    run = Run(environment=env)
    with SessionStore.open(session, create=init) as store:  # a process killed mid-step
        store.commit(run.start("go"))
        store.commit(run.attempt())
        calls = [
            ("w1", "waiting_read", {}),
            ("r1", "read_file", {"path": "README.md"}),
            ("b1", "bash", {"command": "make"}),
        ]
        store.commit(run.answer(None, calls))
        waiting = run.intent("w1", WAITING_READ, {}, replay_policy="safeRead")
        read = run.intent("r1", READ_FILE, {"path": "README.md"})
        bash = run.intent("b1", BASH, {"command": "make"})
        store.commit([waiting, read, bash])

    proc = child(mode, session, workspace)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "replaying\n"
        proc.send_signal(signal.SIGINT)  # the notebook's interrupt, mid-replay
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0 and says in out, (out, err)

    state = load_session(session)
    assert state.open_operation is None
    (op,) = state.operations.values()
    assert op.status == "interrupted"
    results = {}
    for intent in state.tool_intents.values():
        entry = state.entries[intent.result_entry_id].entry
        assert isinstance(entry, ToolResultEntry)
        results[intent.tool_call_id] = (intent.status, entry.message.content)
    assert results == {
        "w1": ("interrupted", REPLAY_CANCELLED_RESULT),  # the replay cut short
        "r1": ("interrupted", REPLAY_CANCELLED_RESULT),  # the one not replayed yet
        "b1": ("interrupted", INTERRUPTED_RESULT),
    }

    # The next load, with nothing left to replay, in this process (no signal to send).
    before = session.read_bytes()
    capsys.readouterr()
    if mode == "notebook-recover":
        monkeypatch.setattr("tiny_agent_nb.notebook._loops.builtin_registry", with_waiting_read)
    recover(mode, session, workspace)
    out = capsys.readouterr().out
    assert then in out, out
    assert "replaying" not in out and "previous kernel stopped" not in out
    after = session.read_bytes()  # nothing settled again; a notebook records its kernel
    added = [json.loads(line) for line in after[len(before) :].splitlines()]
    assert after.startswith(before)
    assert [fact["record"]["type"] for fact in added] == (
        ["kernelOpened"] if mode.startswith("notebook") else []
    )
