"""A cell change in the agent loop: its toolStarted, with the cell id and the old and new
source, is committed before the diff is shown; the user's decision and the result after
it. The diff is asked about whatever `--approve` says; a run stopped while it waits
leaves the intent interrupted, read as "it may have run"."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import AgentLoop, LoopConfig
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import HeaderInit, SessionStore, load_session
from tiny_agent_nb.timeline import outcome_note
from tiny_agent_nb.tools import ToolContext, builtin_registry

from helpers.fake_notebook import FakeNotebook
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply


def run(
    server: OpenAIServer,
    tmp_path: Path,
    notebook: FakeNotebook,
    ask: Callable[[str, Any], bool],
    approval: str = "auto",
) -> tuple[Path, str]:
    path = tmp_path / "nb.agent.jsonl"
    store = SessionStore.open(
        path,
        create=HeaderInit(
            cwd=str(tmp_path), provider="p", model="test/model", environment_identity=str(tmp_path)
        ),
    )
    provider = Provider(ProviderConfig(model="test/model", base_url=server.base_url))
    loop = AgentLoop(
        store,
        provider,
        builtin_registry(),
        ToolContext(workspace=tmp_path, notebook=notebook),
        LoopConfig(ProviderConfig("test/model", provider="p"), approval=approval),  # type: ignore[arg-type]
        ask=ask,
    )
    try:
        return path, loop.run("Fix the cell.").outcome
    finally:
        loop.close()
        store.close()
        provider.close()


@pytest.mark.parametrize(("approval", "accept"), [("auto", True), ("deny", False)])
def test_the_intent_is_committed_before_the_diff_and_the_decision_after(
    server: OpenAIServer, tmp_path: Path, approval: str, accept: bool
) -> None:
    notebook = FakeNotebook("%%agent\nFix the cell.", "total = price * qty", own="c0")
    seen: list[tuple[str, dict[str, Any], list[str]]] = []

    def ask(tool: str, arguments: Any) -> bool:
        intents = load_session(tmp_path / "nb.agent.jsonl").tool_intents.values()
        seen.append((tool, dict(arguments), [f"{i.tool.name} {i.status}" for i in intents]))
        return accept

    server.enqueue(
        tool_calls_reply(tool_call("e1", "edit_cell", {"cell_id": "c1", "source": "total = 1"})),
        text_reply("Done."),
    )
    path, outcome = run(server, tmp_path, notebook, ask, approval)
    assert outcome == "completed"
    recorded = {
        "cell_id": "c1",
        "source": "total = 1",
        "cell_number": 2,
        "cell_count": 2,
        "old_source": "total = price * qty",
    }
    assert seen == [("edit_cell", recorded, ["edit_cell pending"])]
    (intent,) = load_session(path).tool_intents.values()
    assert dict(intent.arguments) == recorded
    assert intent.replay_policy == "never"
    assert intent.status == ("completed" if accept else "denied")
    assert notebook.source("c1") == ("total = 1" if accept else "total = price * qty")
    told = server.requests[1].body["messages"][-1]["content"]
    assert told.startswith("The user accepted" if accept else "The user rejected this change")


def test_changing_the_agent_cell_is_refused_with_intent_and_result_together(
    server: OpenAIServer, tmp_path: Path
) -> None:
    notebook = FakeNotebook("%%agent\nFix the cell.", own="c0")
    asked: list[str] = []
    server.enqueue(
        tool_calls_reply(tool_call("d1", "delete_cell", {"cell_id": "c0"})),
        text_reply("I may not."),
    )
    path, _ = run(server, tmp_path, notebook, lambda tool, _: asked.append(tool) or True)
    assert asked == []
    (intent,) = load_session(path).tool_intents.values()
    assert intent.status == "error"
    told = server.requests[1].body["messages"][-1]["content"]
    assert told == "cell c0 is the running agent cell; nothing was changed"
    assert notebook.applied == []


def test_a_run_stopped_while_the_diff_waits_leaves_the_intent_interrupted(
    server: OpenAIServer, tmp_path: Path
) -> None:
    notebook = FakeNotebook("x = 1")

    def stopped(tool: str, arguments: Any) -> bool:
        raise KeyboardInterrupt

    server.enqueue(
        tool_calls_reply(tool_call("e1", "edit_cell", {"cell_id": "c0", "source": "x = 2"}))
    )
    with pytest.raises(KeyboardInterrupt):
        run(server, tmp_path, notebook, stopped)
    (intent,) = load_session(tmp_path / "nb.agent.jsonl").tool_intents.values()
    assert intent.status == "interrupted"
    assert outcome_note(intent.status) == "it may have run; it was not run again"
    assert notebook.applied == []


def test_a_read_that_fails_unexpectedly_is_a_result_the_model_sees_not_a_failed_run(
    server: OpenAIServer, tmp_path: Path
) -> None:
    class Broken(FakeNotebook):
        def read(self) -> Any:
            raise RuntimeError("the frontend sent something odd")

    server.enqueue(
        tool_calls_reply(tool_call("e1", "edit_cell", {"cell_id": "c0", "source": "x = 2"})),
        text_reply("I could not."),
    )
    path, outcome = run(server, tmp_path, Broken("x = 1"), lambda tool, _: True)
    assert outcome == "completed"
    (intent,) = load_session(path).tool_intents.values()
    assert intent.status == "error"
    told = server.requests[1].body["messages"][-1]["content"]
    assert told == "edit_cell failed: RuntimeError: the frontend sent something odd"
