"""The approval question answered with keys, as its widget sends them to a real kernel
(notebook/_keyed_buttons.py): `a` allows, `d` or Esc denies, `r` allows the tool for
the rest of this session, `s` stops the run (tests/test_notebook_controls.py, with the
other ways to stop while a question waits). A key is a `comm_msg` like a click, heard
while the cell waits on every route (the controls' subshell, a comm subshell, the pump),
and mapped by the kernel: a key it has no answer for changes nothing.

Which button has the focus, and which key the browser sends, is
tests/test_browser_control_keys.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_notebook_controls import ROUTES, frontend, no_widget_kept, results

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.widget_frontend import WidgetFrontend

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers


def answer_with_key(ui: WidgetFrontend, key: str) -> None:
    """Press `key` in the question on screen; returns once the kernel has answered it
    (the question is closed)."""
    question = ui.wait_for_button("Deny").model  # type: ignore[union-attr]
    ui.press_key(question, key)
    ui.until(lambda: not question.open, f"the question answered by {key!r}")


@pytest.mark.parametrize("route", ROUTES)
def test_keys_answer_the_question_as_its_buttons_do(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path, route: str
) -> None:
    ui = frontend(start_kernel, route)
    server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": "touch escaped.txt"})),
        tool_calls_reply(tool_call("c2", "bash", {"command": "touch denied.txt"})),
        tool_calls_reply(tool_call("c3", "bash", {"command": "touch allowed.txt"})),
        tool_calls_reply(tool_call("c4", "bash", {"command": "touch always.txt"})),
        tool_calls_reply(tool_call("c5", "bash", {"command": "touch unasked.txt"})),
        text_reply("Done."),
    )
    cell = ui.send("%%agent --approve ask\nTouch the files.")
    question = ui.wait_for_button("Deny").model  # type: ignore[union-attr]
    ui.press_key(question, "x")  # no answer: the question still waits
    ui.press_key(question, "Escape")
    ui.until(lambda: not question.open, "the question answered by Escape")
    answer_with_key(ui, "d")
    answer_with_key(ui, "a")
    answer_with_key(ui, "r")
    ui.finish(cell)

    assert [outcome for outcome, _ in results(workspace)] == [
        "denied",
        "denied",
        "completed",
        "completed",
        "completed",
    ]
    assert sorted(p.name for p in workspace.glob("*.txt")) == [
        "allowed.txt",
        "always.txt",
        "unasked.txt",
    ]
    assert len(ui.questions()) == 4  # c5 was not asked: `r` allowed bash for the run
    text = cell.text()
    assert '⊘ bash command="touch escaped.txt", timeout=120.0 — denied by you' in text
    assert '✓ bash command="touch allowed.txt", timeout=120.0 — allowed by you' in text
    assert "allowed by you, with every bash call for the rest of this session" in text
    no_widget_kept(cell)
