"""The timeline's "Rewind to before this run" button in real JupyterLab (headless
Chromium, a real kernel, the loopback model server): after a run that overwrote a file,
`%agent timeline` shows a button on the run's row; a click shows `%agent rewind 1`'s plan
below the timeline's cell (the run's row does not fold) and changes nothing; its Confirm
puts the file back. Saved and reopened with no kernel, the row says the command instead,
and no dead widget shows. Screenshots of the live control (light and dark), the plan,
the rewind done and the reopened notebook go to artifacts_dir(), as
test_browser_controls.py's do."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from test_browser_controls import WIDGET_ERRORS, Lab, Page, shown_on_failure

from helpers import lab as shared
from helpers.lab import _save, _set_theme
from helpers.openai_server import text_reply, tool_call, tool_calls_reply

# One JupyterLab at a time on the worker that runs the browser modules.
pytestmark = pytest.mark.xdist_group("browser")

CELLS = [
    "%load_ext tiny_agent_nb",
    "%%agent --approve auto\nRewrite my note.",
    "%agent timeline",
]
TIMELINE = 2
BUTTON = "Rewind to before run 1"


def test_a_run_row_s_rewind_button_calls_the_hook_and_a_reopened_notebook_says_the_command(
    lab: shared.Lab, browser: Any
) -> None:
    p = Lab(lab.lab, lab.server, browser).open("rewind-control", CELLS)
    with shown_on_failure(p, "rewind-control"):
        note = p.root / "note.txt"
        note.write_text("mine\n")
        lab.server.enqueue(
            tool_calls_reply(
                tool_call("w1", "write_file", {"path": "note.txt", "content": "the agent's\n"})
            ),
            text_reply("Rewritten."),
        )
        for n in range(len(CELLS)):
            p.run(n)
            p.idle()
        assert note.read_text() == "the agent's\n"
        timeline = p.outputs(TIMELINE)
        button = timeline.get_by_role("button", name=BUTTON)
        button.wait_for(state="visible")
        assert button.inner_text() == "↶ Rewind to before this run"
        # The record under the widget holds the command; the live widget hides it.
        record = timeline.locator(".tan-control-record code.tan-rewind")
        assert record.inner_text() == "↶ %agent rewind 1"
        assert not record.is_visible()
        run = timeline.locator(".tan-control .tan-run")
        _shoot(p, timeline, "light")
        _set_theme(p, "JupyterLab Dark")
        try:
            _shoot(p, timeline, "dark")
        finally:
            _set_theme(p, "JupyterLab Light")

        button.click()
        timeline.get_by_text("Rewind to just before run 1 (a run):").wait_for(state="visible")
        assert "note.txt: restore 5 bytes" in timeline.inner_text()
        assert run.get_attribute("open") is not None  # the click did not fold the row
        assert note.read_text() == "the agent's\n"  # the plan changes nothing
        confirm = timeline.get_by_role("button", name="Confirm the rewind")
        confirm.wait_for(state="visible")
        p.screenshot("rewind-control-plan-light.png", timeline)
        confirm.click()
        timeline.get_by_text("restored note.txt").wait_for(state="visible")
        assert note.read_text() == "mine\n"
        p.screenshot("rewind-control-done-light.png", timeline)
        _reopened(p)
    p.page.close()


def _shoot(p: Page, timeline: Any, theme: str) -> None:
    timeline.scroll_into_view_if_needed()
    p.screenshot(f"rewind-control-{theme}.png", timeline)


def _reopened(p: Page) -> None:
    """Saved, its kernel gone, reloaded: the row says the command, as text."""
    _save(p.page, p.relative)
    for kernel in p.kernel_ids():
        httpx.delete(p.lab.url(f"api/kernels/{kernel}"), timeout=30)
    p.page.reload()
    p.page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    hint = p.outputs(TIMELINE).locator("code.tan-rewind").first
    hint.wait_for(state="visible")
    assert hint.inner_text() == "↶ %agent rewind 1"
    assert hint.get_attribute("data-run") == "1"
    assert p.outputs(TIMELINE).get_by_role("button", name=BUTTON).count() == 0
    text = p.text()
    for problem in WIDGET_ERRORS:
        assert problem not in text, f"{problem!r} is shown in the reopened notebook"
    assert "restored note.txt" in text  # the click's output was saved with the notebook
    p.screenshot("rewind-control-reopened.png", p.outputs(TIMELINE))
