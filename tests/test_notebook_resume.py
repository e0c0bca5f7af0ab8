"""`%agent resume` after a run stopped by a limit, and the options a run takes, in an
in-process IPython shell against the loopback model server."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.session import load_session

from helpers.ipython_shell import run, run_clean, shell
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply, usage

__all__ = ["shell"]  # the fixture, from ipython_shell

SESSION = "analysis.agent.jsonl"


def _read(n: int, cost: float | None = None) -> dict[str, object]:
    return tool_calls_reply(
        tool_call(f"r{n}", "read_file", {"path": "notes.txt"}), usage=usage(100, 10, cost=cost)
    )


@pytest.fixture
def loaded(shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The extension loaded, notes.txt beside the notebook; the session file's path."""
    (tmp_path / "notes.txt").write_text("hello\n")
    run_clean(shell, "%load_ext tiny_agent_nb", capsys)
    return tmp_path / SESSION


def test_a_run_max_steps_stopped_says_how_to_go_on_and_resume_gives_it_more_steps(
    shell: InteractiveShell,
    server: OpenAIServer,
    loaded: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.enqueue(_read(1), _read(2), text_reply("Read twice."))
    out = run_clean(shell, "%%agent --max-steps 1\nRead the notes twice", capsys)
    assert "stopped after 1 model step (max_steps)" in out
    assert "`%agent resume` gives the run more steps" in out
    again = run_clean(shell, "%agent resume --max-steps 5", capsys)
    assert "Resume ended" not in again
    assert len(server.requests) == 3
    state = load_session(loaded)
    assert [(op.kind, op.status) for op in state.operations.values()] == [
        ("run", "stepLimit"),
        ("resume", "completed"),
    ]


def test_resume_takes_a_budget_and_stops_at_once_while_it_is_still_reached(
    shell: InteractiveShell,
    server: OpenAIServer,
    loaded: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.enqueue(_read(1, 0.012), text_reply("Done.", usage=usage(cost=0.001)))
    out = run_clean(shell, "%%agent --budget 0.01\nRead the notes", capsys)
    assert "budget $0.01 reached" in out and "`%agent resume --budget USD`" in out
    still = run_clean(shell, "%agent resume --budget 0.012", capsys)
    assert "Resume ended: budgetLimit" in still and "(2 operations) spent $0.012" in still
    assert len(server.requests) == 1  # a budget still reached asks no model
    run_clean(shell, "%agent resume --budget 0.05", capsys)
    assert len(server.requests) == 2
    state = load_session(loaded)
    assert [op.status for op in state.operations.values()] == [
        "budgetLimit",
        "budgetLimit",
        "completed",
    ]


@pytest.mark.parametrize("bad", ["--budget 0", "--budget nan", "--max-steps 0"])
def test_resume_with_a_bad_option_is_a_usage_error_and_commits_nothing(
    shell: InteractiveShell, loaded: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    result = shell.run_cell(f"%agent resume {bad}")
    out = capsys.readouterr()
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "Traceback" not in out.out + out.err
    assert load_session(loaded).operations == {}


@pytest.mark.parametrize("empty", ['--tools ""', "--tools ''", "--tools="])
def test_an_empty_tools_option_offers_no_tools(
    shell: InteractiveShell,
    server: OpenAIServer,
    loaded: Path,
    capsys: pytest.CaptureFixture[str],
    empty: str,
) -> None:
    server.enqueue(text_reply("No tools here."), text_reply("Nor here."))
    assert "No tools here." in run_clean(shell, f"%%agent {empty}\nJust answer", capsys)
    assert "tools" not in server.requests[0].body
    # the same as the trait set to no tools
    run(shell, "%config TinyAgent.tools = []", capsys)
    assert "Nor here." in run_clean(shell, "%%agent\nJust answer again", capsys)
    assert "tools" not in server.requests[1].body
