"""The notebook's own tools and system prompt in real kernels: the model is told the date
and the workspace (recorded once in the file), lists the user's DataFrame without running
code, and hands code back as a cell (a set_next_input payload on the agent cell's reply,
one per cell run)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from test_notebook_kernel import assert_clean, load

from tiny_agent_nb.session import load_session

from helpers.kernel_helpers import Execution, StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

pd = pytest.importorskip("pandas")  # the kernel's, the same environment's
# As that pandas names them: pandas 2 (the newest on Python 3.10) says
# `pandas.core.frame.DataFrame` and a string column's dtype `object`, pandas 3 says
# `pandas.DataFrame` and `str`.
FRAME = f"{pd.DataFrame.__module__}.DataFrame"
TEXT = str(pd.Series(["a"]).dtype)

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

SESSION = "analysis.agent.jsonl"
CODE = "by_region = sales.groupby('region').total.sum()\nby_region"


def proposals(run: Execution) -> list[dict[str, object]]:
    assert run.reply is not None
    return [p for p in run.reply.get("payload", []) if p.get("source") == "set_next_input"]


def test_the_model_is_told_the_date_and_the_workspace_and_the_file_keeps_it_once(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(text_reply("one"), text_reply("two"), text_reply("three"))
    kernel = start_kernel(shared=True)
    load(kernel)
    assert_clean(kernel.execute("%%agent\nHello."))
    assert_clean(kernel.execute("%%agent\nAgain."))
    told = [r.body["messages"][0] for r in server.requests]
    assert told[0] == told[1] and told[0]["role"] == "system"
    today = datetime.date.today().isoformat()  # the kernel's day (a midnight between: rerun)
    assert f"Today is {today}." in told[0]["content"]
    assert f"The workspace is {workspace.resolve()}:" in told[0]["content"]
    assert load_session(workspace / SESSION).system_prompt == told[0]["content"]
    records = (workspace / SESSION).read_text(encoding="utf-8").count('"type":"systemPrompt"')
    assert records == 1

    # The trait replaces it whole, and the file records the new text.
    run = kernel.execute("%config TinyAgent.system_prompt = 'Answer in French.'")
    assert_clean(run)
    assert_clean(kernel.execute("%%agent\nEncore."))
    assert server.requests[2].body["messages"][0]["content"] == "Answer in French."
    assert load_session(workspace / SESSION).system_prompt == "Answer in French."


def test_the_model_lists_the_users_dataframe_and_proposes_a_cell(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(
        tool_calls_reply(tool_call("v1", "list_variables", {})),
        tool_calls_reply(tool_call("v2", "list_variables", {"name": "sales"})),
        tool_calls_reply(
            tool_call("p1", "propose_cell", {"code": CODE}),
            tool_call("p2", "propose_cell", {"code": "print('a second cell')"}),
        ),
        text_reply("The sums per region are in the cell below; run it when ready."),
    )
    kernel = start_kernel(shared=True)
    load(kernel)
    setup = (
        "import pandas as pd\n"
        "sales = pd.DataFrame({'region': ['n', 's', 'n'], 'total': [1.5, 2.0, 4.0]})"
    )
    assert_clean(kernel.execute(setup))
    run = kernel.execute("%%agent --approve ask\nSum the totals per region.")
    assert_clean(run)  # --approve ask asked nothing: there is no stdin here to answer it

    listing = server.requests[1].body["messages"][-1]
    print("the variable listing the model got:\n" + listing["content"])
    assert listing["role"] == "tool"
    assert listing["content"].splitlines() == [
        "1 variable(s):",
        f"- sales: {FRAME}, 3 rows, 2 columns: 'region' {TEXT}, 'total' float64",
        "modules: pd",
    ]
    described = server.requests[2].body["messages"][-1]["content"]
    assert described.splitlines()[:2] == [f"sales: {FRAME}", "3 rows, 2 columns"]

    # The first proposal is the cell below the agent cell; the second is refused.
    assert proposals(run) == [{"source": "set_next_input", "text": CODE, "replace": False}]
    first, second = server.requests[3].body["messages"][-2:]
    assert first["content"].startswith(
        "Proposed 2 line(s) of code as a new cell below the agent cell."
    )
    assert second["content"].startswith("a cell was already proposed during this agent cell")
    assert "by_region" not in kernel.execute("print(sorted(globals()))").stdout  # not run
    intents = load_session(workspace / SESSION).tool_intents.values()
    assert [(i.tool.name, i.status) for i in intents] == [
        ("list_variables", "completed"),
        ("list_variables", "completed"),
        ("propose_cell", "completed"),
        ("propose_cell", "error"),
    ]
    assert json.dumps(proposals(run))  # what JupyterLab receives
