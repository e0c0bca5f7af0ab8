"""Where a proposed cell goes, in a real kernel answered as a Jupyter frontend answers:
below the agent cell that asked for it (a `set_next_input` payload on that cell's
execute_reply), or, in a run the Resume button started (it has no execute request, so no
reply of its own), shown in that run's output as code to copy, never left in the payload
for the next cell's reply to deliver below an unrelated cell or in place of the next agent
cell's own proposal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.redaction import redact

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.widget_frontend import Cell, WidgetFrontend

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

SECRET = "sk-proposal-0123456789abcdefghij"
# A fence line inside the code, and the key: the output is redacted as every output is.
SHOWN_CODE = f'doc = """\n```\n"""\nkey = "{SECRET}"'
OWN_CODE = "own = 1\nown"


def proposals(ui: WidgetFrontend, cell: Cell) -> list[dict[str, Any]]:
    payload = ui.reply(cell).get("payload", [])
    return [p for p in payload if p.get("source") == "set_next_input"]


@pytest.mark.parametrize("next_cell", ["an unrelated cell", "an agent cell"])
def test_a_resume_buttons_proposal_is_shown_in_its_output_and_the_next_cells_get_none(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path, next_cell: str
) -> None:
    ui = WidgetFrontend(start_kernel(shared=True, extra={"TINY_AGENT_API_KEY": SECRET}))
    ui.finish(ui.send("%load_ext tiny_agent_nb"))
    # Two steps: the resume keeps the run's limit, and takes two (its calls, its answer).
    server.enqueue(
        tool_calls_reply(tool_call("v1", "list_variables", {})),
        tool_calls_reply(tool_call("v2", "list_variables", {})),
    )
    stopped = ui.finish(ui.send("%%agent --max-steps 2\nLook around."))

    # The model proposes a cell and its code sets the next input itself, both in a run
    # the Resume button started.
    server.enqueue(
        tool_calls_reply(
            tool_call("p1", "propose_cell", {"code": SHOWN_CODE}),
            tool_call("c1", "python", {"code": "get_ipython().set_next_input('# stray')"}),
        ),
        text_reply("The code is above."),
    )
    ui.click(ui.wait_for_button("Resume"))
    ui.until(lambda: "The code is above." in stopped.text(), "the resumed answer")
    result = server.requests[-1].body["messages"][-2]
    assert result["content"].startswith(
        "Proposed 4 line(s) of code as code shown in the run's output for the user to "
        "copy, not as a new cell: a run resumed with the Resume button has no cell run of "
        "its own"
    )
    shown = next(d for d in stopped.outputs() if "not inserted" in d.get("text/plain", ""))
    assert shown["text/plain"].endswith(f"\n\n````python\n{redact(SHOWN_CODE, [SECRET])}\n````")
    assert SECRET not in str(stopped.outputs())
    # One code block, the whole of the code: its fence line did not end it.
    assert shown["text/markdown"].count("<pre><code>") == 1
    assert shown["text/markdown"].endswith("</code></pre>")

    if next_cell == "an unrelated cell":
        unrelated = ui.finish(ui.send("x = 1"))
        assert proposals(ui, unrelated) == []
    # The next agent cell's own proposal is the one below it.
    server.enqueue(
        tool_calls_reply(tool_call("p2", "propose_cell", {"code": OWN_CODE})),
        text_reply("The code is below."),
    )
    agent = ui.finish(ui.send("%%agent\nPropose a cell."))
    assert proposals(ui, agent) == [
        {"source": "set_next_input", "text": OWN_CODE, "replace": False}
    ]
    result = server.requests[-1].body["messages"][-1]
    assert result["content"].startswith(
        "Proposed 2 line(s) of code as a new cell below the agent cell."
    )
