"""The approval question answered from the keyboard in real JupyterLab (headless
Chromium, a real kernel), as a dialog is: its Allow button has the focus when it
appears, Enter allows, Esc denies, a letter answers as the button it underlines, and a
key it has no answer for does nothing (not even the notebook's own command: `x` would
cut the cell). Its focus is never taken from a cell the user is typing in.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from test_browser_controls import Lab, Page, _button, shown_on_failure

from helpers import lab as shared
from helpers.openai_server import text_reply, tool_call, tool_calls_reply

pytestmark = pytest.mark.xdist_group("browser")

CELLS = [
    "%load_ext tiny_agent_nb",
    "%%agent --approve ask\nRemove the build directory.",
    "%%agent --approve ask\nRemove the dist directory.",
    "%%agent --approve ask\nRemove the docs directory.",
    "%%agent --approve ask\nRemove the site directory.",
    "# a note the user is writing",
]
# The focused element is the button of `choice` in cell `n`'s outputs.
FOCUSED_JS = """([n, choice]) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[n];
  const active = document.activeElement;
  return !!active && cell.contains(active) && active.dataset.choice === choice;
}"""
# Resolves after two frames: a question shown takes the focus at the frame after it
# is on the page.
NEXT_FRAMES_JS = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
TYPING_IN_JS = """(n) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[n];
  return cell.querySelector('.cm-content').contains(document.activeElement);
}"""


@pytest.fixture(scope="module")
def lab(lab: shared.Lab, browser: Any) -> Iterator[Lab]:
    yield Lab(lab.lab, lab.server, browser)


def _ask(p: Page, n: int, directory: str) -> Any:
    """Run cell `n`, whose answer is `rm -rf <directory>`; the question's Allow button,
    once it shows."""
    (p.root / directory).mkdir()
    p.server.enqueue(
        tool_calls_reply(tool_call(f"c{n}", "bash", {"command": f"rm -rf {directory}"})),
        text_reply("Answered."),
    )
    p.run(n)
    return _button(p, n, "Allow")


def _answered(p: Page, n: int, said: str) -> None:
    p.outputs(n).locator(".tan-control-record", has_text=said).wait_for(state="visible")
    p.idle()


def test_the_question_takes_the_focus_and_answers_to_keys(lab: Lab) -> None:
    p = lab.open("keys", CELLS)
    with shown_on_failure(p, "keys"):
        p.run(0)
        p.idle()

        # Enter presses the focused button: Allow, focused when the question appeared.
        allow = _ask(p, 1, "build")
        p.page.wait_for_function(FOCUSED_JS, arg=[1, "allow"])
        assert allow.locator("u").inner_text() == "A"  # its key, underlined
        p.screenshot("control-keys-focused.png", p.outputs(1))
        p.page.keyboard.press("Enter")
        _answered(p, 1, "allowed by you")
        assert not (p.root / "build").exists()

        # Esc denies.
        _ask(p, 2, "dist")
        p.page.wait_for_function(FOCUSED_JS, arg=[2, "allow"])
        p.page.keyboard.press("Escape")
        _answered(p, 2, "denied by you")
        assert (p.root / "dist").exists()

        # A key with no answer does nothing; the notebook's `x` does not cut the cell.
        _ask(p, 3, "docs")
        p.page.wait_for_function(FOCUSED_JS, arg=[3, "allow"])
        p.page.keyboard.press("x")
        p.page.keyboard.press("a")
        _answered(p, 3, "allowed by you")
        assert not (p.root / "docs").exists()
        assert p.page.locator(".jp-Notebook .jp-CodeCell").count() >= len(CELLS)
        assert "Remove the docs directory." in p.cell(3).inner_text()
    p.page.close()


def test_the_question_leaves_the_focus_in_a_cell_the_user_is_typing_in(lab: Lab) -> None:
    p = lab.open("typing", ["%load_ext tiny_agent_nb", *CELLS[1:2], CELLS[-1]])
    with shown_on_failure(p, "typing"):
        p.run(0)
        p.idle()
        (p.root / "build").mkdir()
        answer = threading.Event()
        sent = len(p.server.requests)
        p.server.enqueue(
            tool_calls_reply(tool_call("c1", "bash", {"command": "rm -rf build"}), hold=answer),
            text_reply("Left."),
        )
        p.run(1)
        p.server.wait_for_requests(sent + 1, timeout=60)
        editor = p.cell(2).locator(".cm-content")
        editor.click()
        p.page.keyboard.type(" while the model thinks")
        answer.set()
        _button(p, 1, "Allow")
        p.page.evaluate(NEXT_FRAMES_JS)  # where the question takes the focus, it has
        p.page.keyboard.type(", and after")
        assert p.page.evaluate(TYPING_IN_JS, 2)
        assert "while the model thinks, and after" in editor.inner_text()
        assert (p.root / "build").exists()  # nothing typed reached the question
        _button(p, 1, "Deny").click()
        _answered(p, 1, "denied by you")
    p.page.close()
