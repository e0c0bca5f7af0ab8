"""The timeline's Rewind buttons in a real kernel, clicked as JupyterLab 4.4+ sends a click
(a `comm_msg` on a comm subshell): while a run is open the widget says so and nothing
happens; once the kernel is free a click calls the runtime's hook, its output under the
timeline's cell; and the notebook keeps the timeline's record, saying the command."""

from __future__ import annotations

import threading
from pathlib import Path

from test_notebook_controls import frontend

from tiny_agent_nb.notebook._rewind_control import RUN_OPEN
from tiny_agent_nb.session import load_session

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply
from helpers.widget_frontend import WIDGET_VIEW

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

SESSION = "analysis.agent.jsonl"


def test_a_rewind_click_waits_for_the_run_to_end_and_then_reaches_the_hook(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    ui = frontend(start_kernel, "comm subshell")
    server.enqueue(text_reply("Hello."))
    ui.finish(ui.send("%%agent\nSay hello."))
    timeline = ui.finish(ui.send("%agent timeline"))
    (buttons,) = [m for m in ui._shown_tree(timeline) if "html" in m.state]
    assert 'class="tan-rewind" data-run="1"' in buttons.state["html"]
    (record,) = [d for d in timeline.outputs() if WIDGET_VIEW not in d]
    assert "↶ %agent rewind 1" in record["text/html"]

    release = threading.Event()
    server.enqueue(text_reply("Later.", hold=release))
    cell = ui.send("%%agent\nSay more.")
    ui.until(lambda: 'data-status="open"' in buttons.state["html"], "the run drawn open")
    ui._custom(buttons, {"rewind": 1})
    ui.until(lambda: buttons.state.get("said") == RUN_OPEN, "the widget to say a run is open")
    release.set()
    ui.finish(cell)
    assert timeline.stdout == ""
    ui.until(lambda: buttons.state.get("said") == "", "the answer gone with the run")

    # By default a click is `%agent rewind 1`: its plan, under the timeline, changing nothing.
    ui._custom(buttons, {"rewind": 1})
    said = "Rewind to just before run 1 (a run):"
    ui.until(lambda: said in timeline.stdout, "the plan under the timeline's cell")
    assert [op.kind for op in load_session(workspace / SESSION).operations.values()] == [
        "run",
        "run",
    ]
    ui.click(ui.wait_for_button("Confirm the rewind"))
    ui.until(
        lambda: (
            [op.kind for op in load_session(workspace / SESSION).operations.values()]
            == ["run", "run", "rewind"]
        ),
        "the rewind, confirmed under the timeline",
    )

    set_hook = "get_ipython().magics_manager.registry['AgentMagics'].runtime.on_rewind = print"
    ui.finish(ui.send(set_hook))
    ui._custom(buttons, {"rewind": 2})
    ui.until(lambda: timeline.stdout.endswith("\n2\n"), "the runtime's hook, given 2")
