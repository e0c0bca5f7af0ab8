"""`%agent rewind K` and `--undo` in a shell (docs/spec.md §17): the plan first, nothing
changed without `--yes`, then the conversation the next request sends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from helpers.ipython_shell import KEY, fresh_shell, run, served
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply


@pytest.fixture
def shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: OpenAIServer
) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the file store
    yield from fresh_shell(tmp_path, monkeypatch, served(server.base_url, KEY))


def test_rewind_shows_the_plan_changes_nothing_until_yes_and_undo_goes_back(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(text_reply("answer 1"))
    run(shell, "%%agent\nprompt 1", capsys)
    server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": "echo hi > made.txt"})),
        text_reply("answer 2"),
    )
    run(shell, "%%agent\nprompt 2", capsys)
    before = Path("analysis.agent.jsonl").read_bytes()
    plan = run(shell, "%agent rewind 2", capsys)
    assert "Rewind to just before run 2 (a run):" in plan
    assert "1 run(s) leave it" in plan
    assert "bash: echo hi > made.txt" in plan
    assert "Nothing has changed yet. `%agent rewind 2 --yes` carries it out." in plan
    assert Path("analysis.agent.jsonl").read_bytes() == before
    assert "Rewound: 0 file(s) restored." in run(shell, "%agent rewind 2 --yes", capsys)
    server.enqueue(text_reply("answer 3"))
    run(shell, "%%agent\nprompt 3", capsys)
    sent = [m["content"] for m in server.requests[-1].body["messages"][1:]]
    assert sent[-3:] == ["prompt 1", "answer 1", "prompt 3"]
    assert "Undo rewind 3" in run(shell, "%agent rewind --undo --yes", capsys)
    server.enqueue(text_reply("answer 4"))
    run(shell, "%%agent\nprompt 4", capsys)
    sent = [m["content"] for m in server.requests[-1].body["messages"][1:]]
    assert "prompt 2" in sent and "prompt 3" not in sent and sent[-1] == "prompt 4"


def test_rewind_refuses_what_it_cannot_do(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    shell.run_cell("%agent rewind --undo")
    assert "no rewind to undo" in capsys.readouterr().out
    shell.run_cell("%agent rewind 7")
    assert "there is no run 7" in capsys.readouterr().out
    shell.run_cell("%agent status --yes")
    assert "--yes goes with %agent rewind" in "".join(capsys.readouterr())


def test_a_cell_whose_run_was_rewound_asks_the_model_again(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cell executed again shows its recorded run (docs/spec.md §12), unless a rewind
    left that run behind: then the model is asked anew."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(text_reply("One."))
    assert shell.run_cell("%%agent\nSay one.", cell_id="cell-a").error_in_exec is None
    assert shell.run_cell("%%agent\nSay one.", cell_id="cell-a").error_in_exec is None
    assert len(server.requests) == 1  # shown again from the session
    run(shell, "%agent rewind 1 --yes", capsys)
    server.enqueue(text_reply("One again."))
    assert shell.run_cell("%%agent\nSay one.", cell_id="cell-a").error_in_exec is None
    assert len(server.requests) == 2
    assert "One again." in capsys.readouterr().out


def test_a_forced_rewind_keeps_what_it_overwrites_under_the_configured_caps(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    note = tmp_path / "note.txt"
    note.write_text("mine\n")
    server.enqueue(
        tool_calls_reply(tool_call("w", "write_file", {"path": "note.txt", "content": "agent\n"})),
        text_reply("Written."),
    )
    run(shell, "%%agent --approve auto\nRewrite my note.", capsys)
    note.write_text("the user's again\n" * 40)  # 680 bytes: a conflict past a 100-byte cap
    run(shell, "%config TinyAgent.file_history_max_file = 100", capsys)
    out = run(shell, "%agent rewind 1 --force --yes", capsys)
    assert "per-file cap of 100" in out, out
    assert note.read_text() == "the user's again\n" * 40  # never lost to a rewind

    run(shell, "%config TinyAgent.file_history_max_file = 10000", capsys)
    run(shell, "%agent rewind --undo --yes", capsys)  # the first rewind restored nothing
    out = run(shell, "%agent rewind 1 --force --yes", capsys)
    assert "restored note.txt" in out, out
    assert note.read_text() == "mine\n"
