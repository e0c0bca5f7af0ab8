"""A notebook's session file replaced on disk, and `%agent new` (docs/session-format.md §6.4): a
kernel never writes where nobody reads, says so in one line, and the next
`%agent session` works from what is on disk."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.session import HeaderInit, SessionStore, load_session
from tiny_agent_nb.session import facts as f

from helpers.ipython_shell import run, shell
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

__all__ = ["shell"]  # the fixture, from ipython_shell

SESSION = "analysis.agent.jsonl"
MESSAGES = 3


def renamed_over(path: Path, data: bytes) -> None:
    """What `git checkout` does to a file: a new one beside it, renamed over it."""
    fresh = path.with_name(f".{path.name}.checkout")
    fresh.write_bytes(data)
    fresh.replace(path)


def refusal(out: str, path: Path) -> str:
    """The one line that says the file changed on disk, what was kept, and what to do."""
    lines = [line for line in out.splitlines() if "changed on disk" in line]
    assert len(lines) == 1, out
    line = lines[0]
    assert line.startswith(f"tiny-agent-nb: {path.name} changed on disk"), line
    assert "nothing was written there or anywhere else" in line, line
    assert f"`%agent session {shlex.quote(str(path))}` opens what is there now" in line, line
    return line


def files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if not p.name.startswith(".ipython")}


def test_a_session_file_replaced_between_cells_refuses_the_next_cell(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / SESSION
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(text_reply("first answer"), text_reply("second answer"))
    run(shell, "%%agent\nfirst question", capsys)
    checked_out = path.read_bytes()  # the version a `git checkout` brings back
    run(shell, "%%agent\nsecond question", capsys)
    renamed_over(path, checked_out)
    before = files(tmp_path)

    out = run(shell, "%%agent\nthird question", capsys)
    refusal(out, path)
    assert len(server.requests) == 2  # the model was not asked
    assert path.read_bytes() == checked_out
    assert files(tmp_path) == before  # and nothing was written beside it
    refusal(run(shell, "%agent status", capsys), path)

    out = run(shell, f"%agent session {SESSION}", capsys)
    assert f"session {SESSION} (set explicitly) — 1 run(s)" in out
    server.enqueue(text_reply("third answer"))
    out = run(shell, "%%agent\nthird question", capsys)
    assert "third answer" in out
    sent = [m["content"] for m in server.requests[-1].body["messages"][1:]]
    assert sent == ["first question", "first answer", "third question"]
    assert len(load_session(path).operations) == 2


def test_a_session_file_replaced_during_a_run_stops_the_run_in_one_line(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The model's own command checks out an older version of the session: the tool's
    result is refused, the run stops, and the next `%agent session` settles the run as
    the file on disk has it."""
    path = tmp_path / SESSION
    run(shell, "%load_ext tiny_agent_nb", capsys)
    command = f"cp {SESSION} copy && mv copy {SESSION}"
    server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": command})),
        text_reply("never asked for"),
    )
    out = run(shell, "%%agent\ncheck out the session", capsys)
    refusal(out, path)
    assert "✗" not in out and "Traceback" not in out
    assert len(server.requests) == 1
    on_disk = load_session(path)  # the copy: the run and its intent, no result
    assert [i.status for i in on_disk.tool_intents.values()] == ["pending"]

    out = run(shell, f"%agent session {SESSION}", capsys)
    assert "The previous kernel stopped during a run" in out
    assert "bash" in out and "interrupted" in out
    assert [i.status for i in load_session(path).tool_intents.values()] == ["interrupted"]


def test_new_keeps_the_old_conversation_under_another_name(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / SESSION
    init = HeaderInit(cwd=str(tmp_path), provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        for n in range(MESSAGES):
            store.commit([f.user_message(f"message {n}")])
    run(shell, "%load_ext tiny_agent_nb", capsys)
    out = run(shell, "%agent new", capsys)
    archived = tmp_path / "analysis.agent.1.jsonl"
    assert f"Kept the previous conversation as {archived.name}." in out
    assert sorted(p.name for p in tmp_path.glob("analysis.*")) == [archived.name, SESSION]
    # the messages, and the kernelOpened of the kernel that wrote it last (docs/spec.md §9)
    assert load_session(archived).last_seq == MESSAGES + 1
    assert len(load_session(path).entries) == 0
