"""`%%agent --budget` and `TinyAgent.budget` in an in-process IPython shell, and the
budget stop as status, usage, the timeline and the CLI show it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.cli import main
from tiny_agent_nb.session import load_session

from helpers.ipython_shell import run, shell
from helpers.mcp_helpers import stdio_entry
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply, usage

__all__ = ["shell"]  # the fixture, from ipython_shell

STOP = "budget $0.01 reached: this run spent $0.012"


def _read(n: int, cost: float | None) -> dict[str, object]:
    return tool_calls_reply(
        tool_call(f"r{n}", "read_file", {"path": "notes.txt"}), usage=usage(100, 10, cost=cost)
    )


def _loaded(shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """notes.txt beside the notebook, and the extension loaded."""
    (tmp_path / "notes.txt").write_text("hello\n")
    run(shell, "%load_ext tiny_agent_nb", capsys)


def test_budget_option_stops_the_run_and_every_view_shows_the_spend(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _loaded(shell, tmp_path, capsys)
    server.enqueue(_read(1, 0.012), text_reply("never sent"))
    out = run(shell, "%%agent --budget 0.01\nRead the notes", capsys)
    assert len(server.requests) == 1
    assert f"‖ {STOP}" in out
    assert "did not run. `%agent resume --budget USD`, with more than the run spent" in out
    path = tmp_path / "analysis.agent.jsonl"
    (op,) = load_session(path).operations.values()
    # The file keeps the statement; the advice is the notebook's, said in the cell only.
    assert op.status == "budgetLimit" and op.detail is not None
    assert op.detail.startswith(STOP) and "TinyAgent" not in op.detail
    for view in ("%agent status", "%agent usage"):
        shown = run(shell, view, capsys)
        assert "budgetLimit" in shown and STOP in shown, view
    for command in ("timeline", "inspect", "usage"):
        assert main([command, str(path)]) == 0
        shown = capsys.readouterr().out
        assert "budgetLimit" in shown and STOP in shown, command
        assert "TinyAgent" not in shown and "%agent" not in shown, command


def test_budget_trait_applies_and_unknown_cost_is_said_once(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _loaded(shell, tmp_path, capsys)
    run(shell, "%config TinyAgent.budget = 0.01", capsys)
    server.enqueue(_read(1, None), _read(2, None), text_reply("Read twice."))
    out = run(shell, "%%agent\nRead the notes twice", capsys)
    assert out.count("cost unknown") == 1
    assert "Read twice." in out


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf"])
def test_a_bad_budget_is_a_usage_error_and_commits_nothing(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    result = shell.run_cell(f"%%agent --budget {bad}\nhi")
    out = capsys.readouterr()
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "--budget must be a positive number of USD" in str(result.error_in_exec)
    assert "Traceback" not in out.out + out.err
    assert load_session(tmp_path / "analysis.agent.jsonl").operations == {}


@pytest.mark.parametrize("bad", ["0", "-0.5", "float('nan')"])
def test_a_bad_budget_trait_is_refused(
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    bad: str,
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    shell.run_cell(f"%config TinyAgent.budget = {bad}")
    assert "TinyAgent.budget must be a positive number of USD" in caplog.text


def test_parallel_mcp_calls_that_report_cost_stop_at_the_budget(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One answer asks for 20 calls of the MCP test server's `with_usage` tool, which
    reports $0.0042 of its own each: under --budget 0.01 the third one crosses it, and
    the other 17 never reach the server."""
    _loaded(shell, tmp_path, capsys)
    value = json.dumps({"mcpServers": {"tiny": stdio_entry()}})
    run(shell, f"%config TinyAgent.mcp_servers = {value!r}", capsys)
    calls = [tool_call(f"u{n}", "tiny__with_usage", {}) for n in range(20)]
    server.enqueue(tool_calls_reply(*calls, usage=usage(100, 10, cost=0.0)), text_reply("never"))
    out = run(shell, "%%agent --budget 0.01\nSummarise twenty times", capsys)
    assert out.count("✓ tiny__with_usage completed") == 3
    assert "this run spent $0.0126" in out
    assert "17 tool calls of the last answer did not run" in out
    state = load_session(tmp_path / "analysis.agent.jsonl")
    assert [i.tool_call_id for i in state.tool_intents.values()] == ["u0", "u1", "u2"]
    (op,) = state.operations.values()
    assert op.status == "budgetLimit"
    assert len(server.requests) == 1
