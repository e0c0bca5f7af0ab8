"""The generic path every tool from outside the package takes (an MCP server's tool is
one): its own usage, approval, Ctrl-C. The tool here is written in the test with the
shape an MCP tool has (source `mcp:demo`, replay policy `never`, a model-visible name
`demo__echo` for the server's tool `echo`), so the agent is tested on what it sees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_agent_loop import Harness, workspace

from tiny_agent_nb.agent._planner import ABORTED_RESULT
from tiny_agent_nb.cli import main
from tiny_agent_nb.render import timeline_html, timeline_text
from tiny_agent_nb.session import ToolIdentity, ToolResultEntry, load_session
from tiny_agent_nb.timeline import build_timeline
from tiny_agent_nb.tools import Tool, ToolArguments, ToolContext, ToolOutput, ToolUsage

from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply, usage

__all__ = ["workspace"]  # the fixture, shared with test_agent_loop


class Echo(Tool):
    """A server's `echo` tool as the agent sees it. `reported` is the usage its result
    carries; `interrupt` makes its call end as Ctrl-C ends one (after its effect began)."""

    name = "demo__echo"
    source = "mcp:demo"
    version = "0.3.1"
    description = "Echoes its text."
    replay_policy: ClassVar = "never"

    class Arguments(ToolArguments):
        text: str

    def __init__(self, reported: ToolUsage | None = None, *, interrupt: bool = False) -> None:
        self.reported = reported
        self.interrupt = interrupt
        self.calls: list[dict[str, Any]] = []

    @property
    def identity(self) -> ToolIdentity:
        return ToolIdentity(name="echo", version=self.version, source=self.source)

    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.calls.append(arguments)
        if self.interrupt:
            raise KeyboardInterrupt
        return ToolOutput(f"echo: {arguments['text']}", usage=self.reported)


REPORTED = ToolUsage(
    input_tokens=40, output_tokens=7, reasoning_tokens=2, cached_input_tokens=5, cost=0.0031
)


def _echo_run(server: OpenAIServer, h: Harness, text: str = "hi") -> None:
    server.enqueue(
        tool_calls_reply(tool_call("e1", "demo__echo", {"text": text}), usage=usage(10, 2)),
        text_reply("done", usage=usage(20, 3)),
    )
    h.loop.run("echo it")


def test_usage_a_tool_reports_is_bound_to_its_call_in_the_results_transaction(
    server: OpenAIServer, workspace: Path
) -> None:
    h = Harness(server, workspace, extra_tools=(Echo(REPORTED),))
    try:
        _echo_run(server, h)
        state = load_session(h.path)
        (intent,) = state.tool_intents.values()
        assert intent.tool == ToolIdentity(name="echo", version="0.3.1", source="mcp:demo")
        assert intent.status == "completed"
        u = state.usage[intent.id]
        assert (u.toolStartedId, u.attemptId) == (intent.id, None)
        assert (u.inputTokens, u.outputTokens, u.reasoningTokens, u.cachedInputTokens) == (
            40,
            7,
            2,
            5,
        )
        assert u.cost == 0.0031
        # The result and its usage are one line of the file: one transaction.
        lines = [json.loads(line) for line in h.path.read_text().splitlines()[1:]]
        (line,) = [
            facts
            for facts in (x if isinstance(x, list) else [x] for x in lines)
            if any(x["kind"] == "usage" and x["usage"].get("toolStartedId") for x in facts)
        ]
        assert [x["kind"] for x in line] == ["entry", "usage"]
        assert line[0]["id"] == intent.result_entry_id
        # The run's ledger and the session's totals count the tool's tokens and cost.
        assert state.totals.input_tokens == 10 + 40 + 20
        assert state.totals.cost == pytest.approx(0.0031)
    finally:
        h.close()


def test_a_tool_that_reports_no_usage_gets_no_usage_fact(
    server: OpenAIServer, workspace: Path
) -> None:
    h = Harness(server, workspace, extra_tools=(Echo(None),))
    try:
        _echo_run(server, h)
        state = load_session(h.path)
        (intent,) = state.tool_intents.values()
        assert intent.status == "completed"
        assert intent.id not in state.usage  # unknown, not zero
    finally:
        h.close()


def test_usage_the_file_cannot_hold_is_dropped_and_the_result_kept(
    server: OpenAIServer, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = ToolUsage(input_tokens=-1, cost=float("nan"))
    h = Harness(server, workspace, extra_tools=(Echo(bad),))
    try:
        _echo_run(server, h)
        state = load_session(h.path)
        (op,) = state.operations.values()
        (intent,) = state.tool_intents.values()
        assert op.status == "completed"
        assert intent.status == "completed" and intent.id not in state.usage
        assert "usage reported by tool call" in caplog.text
    finally:
        h.close()


def test_usage_and_timeline_show_a_tools_reported_usage_and_its_source(
    server: OpenAIServer, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h = Harness(server, workspace, extra_tools=(Echo(REPORTED),))
    try:
        _echo_run(server, h, text="<b>x</b>")
        state = load_session(h.path)
        assert main(["usage", str(h.path), "--json"]) == 0
        (run,) = json.loads(capsys.readouterr().out)["usage"]["runs"]
        assert run["outputTokens"] == 2 + 7 + 3
        assert run["cost"] == pytest.approx(0.0031)
        assert main(["usage", str(h.path)]) == 0
        table = capsys.readouterr().out
        assert "at least $0.0031" in table  # the attempts reported no cost
        timeline = build_timeline(state)
        (tool,) = timeline.runs[0].tools
        assert tool.source == "mcp:demo"
        assert (tool.input_tokens, tool.output_tokens, tool.cost) == (40, 7, 0.0031)
        text = timeline_text(timeline)
        assert "echo · mcp:demo" in text and "40 in / 7 out · cost $0.0031" in text
        page = timeline_html(timeline)
        assert "<code>demo__echo</code> · mcp:demo" in page and "cost $0.0031" in page
    finally:
        h.close()


@pytest.mark.parametrize(
    ("approval", "answer", "status"),
    [("deny", None, "denied"), ("ask", False, "denied"), ("ask", True, "completed")],
)
def test_approval_applies_to_a_never_tool_from_a_server(
    server: OpenAIServer, workspace: Path, approval: str, answer: bool | None, status: str
) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def ask(name: str, arguments: Any) -> bool:
        asked.append((name, dict(arguments)))
        return bool(answer)

    echo = Echo(REPORTED)
    h = Harness(server, workspace, extra_tools=(echo,), approval=approval, ask=ask)
    try:
        _echo_run(server, h, text="rm -rf /")
        state = load_session(h.path)
        (intent,) = state.tool_intents.values()
        assert intent.status == status
        assert echo.calls == ([{"text": "rm -rf /"}] if status == "completed" else [])
        # `ask` is shown the name the model called and the arguments that would be sent.
        assert asked == ([] if approval == "deny" else [("demo__echo", {"text": "rm -rf /"})])
        assert (intent.id in state.usage) == (status == "completed")  # refused: nothing used
    finally:
        h.close()


def test_ctrl_c_in_a_never_tool_leaves_an_aborted_result_and_the_next_run_works(
    server: OpenAIServer, workspace: Path
) -> None:
    echo = Echo(REPORTED, interrupt=True)
    h = Harness(server, workspace, extra_tools=(echo,))
    try:
        server.enqueue(tool_calls_reply(tool_call("e1", "demo__echo", {"text": "slow"})))
        with pytest.raises(KeyboardInterrupt):
            h.loop.run("echo slowly")
        state = load_session(h.path)
        (op,) = state.operations.values()
        (intent,) = state.tool_intents.values()
        assert echo.calls == [{"text": "slow"}]
        assert (op.status, intent.status) == ("aborted", "interrupted")
        result = state.entries[intent.result_entry_id].entry
        assert isinstance(result, ToolResultEntry) and result.message.content == ABORTED_RESULT
        records = [x.record.type for x in state.facts if x.kind == "record"]
        assert records[-2:] == ["abortRequested", "operationFinished"]
        assert intent.id not in state.usage  # an interrupted call reported nothing

        echo.interrupt = False
        server.enqueue(text_reply("fine"))
        assert h.loop.run("go on").outcome == "completed"
        sent = server.requests[-1].body["messages"]
        assert [m["content"] for m in sent if m["role"] == "tool"] == [ABORTED_RESULT]
        assert echo.calls == [{"text": "slow"}]  # never re-run
    finally:
        h.close()


def test_the_budget_counts_the_cost_a_tool_reports(server: OpenAIServer, workspace: Path) -> None:
    """The attempts cost $0.002; the tool's own $0.0031 is what reaches the $0.005 budget."""
    h = Harness(server, workspace, extra_tools=(Echo(REPORTED),), budget=0.005)
    try:
        server.enqueue(
            tool_calls_reply(
                tool_call("e1", "demo__echo", {"text": "a"}), usage=usage(10, 2, cost=0.002)
            ),
            text_reply("never sent"),
        )
        result = h.loop.run("echo it")
    finally:
        h.close()
    assert len(server.requests) == 1
    assert result.outcome == "budgetLimit"
    assert result.detail is not None and "this run spent $0.0051" in result.detail
