"""The notebook's own tools in the agent loop: list_variables and propose_cell run under
`--approve ask` and `deny` without asking (neither runs the model's code), each behind its
intent, and neither is replayed after a crash (the kernel they acted on is gone)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import AgentLoop, LoopConfig
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import HeaderInit, SessionStore, load_session
from tiny_agent_nb.tools import ToolContext, builtin_registry

from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.scenario import Run

CODE = "totals = df.groupby('region').total.sum()\ntotals"


@pytest.mark.parametrize("approval", ["ask", "deny"])
def test_reading_variables_and_proposing_a_cell_ask_for_no_approval(
    server: OpenAIServer, tmp_path: Path, approval: str
) -> None:
    path = tmp_path / "nb.agent.jsonl"
    store = SessionStore.open(
        path,
        create=HeaderInit(
            cwd=str(tmp_path), provider="p", model="test/model", environment_identity=str(tmp_path)
        ),
    )
    asked: list[str] = []
    proposed: list[tuple[str, list[str]]] = []

    def propose(code: str) -> str:
        # What the file said when the cell was put in the notebook: its intent, pending.
        intents = load_session(path).tool_intents.values()
        proposed.append((code, [f"{i.tool.name} {i.status}" for i in intents]))
        return "as a new cell below the agent cell"

    def ask(name: str, arguments: Any) -> bool:
        asked.append(name)
        return False

    provider = Provider(ProviderConfig(model="test/model", base_url=server.base_url))
    loop = AgentLoop(
        store,
        provider,
        builtin_registry(),
        ToolContext(workspace=tmp_path, namespace={"rate": 0.25}, propose_cell=propose),
        LoopConfig(ProviderConfig("test/model", provider="p"), approval=approval),  # type: ignore[arg-type]
        ask=ask,
    )
    server.enqueue(
        tool_calls_reply(
            tool_call("v1", "list_variables", {}),
            tool_call("p1", "propose_cell", {"code": CODE}),
        ),
        text_reply("I put the grouping in a cell below."),
    )
    try:
        result = loop.run("Sum the totals per region.")
    finally:
        loop.close()
        store.close()
        provider.close()
    assert result.outcome == "completed"
    assert asked == []
    assert proposed == [(CODE, ["list_variables completed", "propose_cell pending"])]
    state = load_session(path)
    assert [(i.tool.name, i.replay_policy, i.status) for i in state.tool_intents.values()] == [
        ("list_variables", "never", "completed"),
        ("propose_cell", "never", "completed"),
    ]
    listing, proposal = server.requests[1].body["messages"][-2:]
    assert listing["content"] == "1 variable(s):\n- rate: float, 0.25"
    assert proposal["content"].startswith(
        "Proposed 2 line(s) of code as a new cell below the agent cell."
    )


def test_after_a_crash_neither_is_run_again(tmp_path: Path) -> None:
    path = tmp_path / "nb.agent.jsonl"
    init = HeaderInit(
        cwd=str(tmp_path), provider="p", model="test/model", environment_identity=str(tmp_path)
    )
    store = SessionStore.open(path, create=init)
    run = Run(str(tmp_path))
    store.commit(run.start("Look at my variables."))
    store.commit(run.attempt())
    calls = [("v1", "list_variables", {"name": None}), ("p1", "propose_cell", {"code": "1"})]
    store.commit(run.answer(None, calls))
    tools = builtin_registry()
    for call, name, arguments in calls:
        tool = tools.get(name)
        assert tool is not None
        store.commit([run.intent(call, tool.identity, arguments, replay_policy=tool.replay_policy)])
    proposed: list[str] = []

    def propose(code: str) -> str:
        proposed.append(code)
        return "as a new cell below the agent cell"

    loop = AgentLoop(
        store,
        Provider(ProviderConfig(model="test/model", base_url="http://127.0.0.1:9/v1")),
        tools,
        ToolContext(workspace=tmp_path, namespace={"rate": 1}, propose_cell=propose),
        LoopConfig(ProviderConfig("test/model", provider="p")),
    )
    try:
        report = loop.recover()
    finally:
        loop.close()
        store.close()
    assert report is not None
    assert report.replayed == ()
    assert [i.tool.name for i in report.interrupted] == ["list_variables", "propose_cell"]
    assert proposed == []
    statuses = [i.status for i in load_session(path).tool_intents.values()]
    assert statuses == ["interrupted", "interrupted"]
