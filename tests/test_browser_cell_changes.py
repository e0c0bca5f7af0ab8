"""A cell change's diff in real JupyterLab (headless Chromium, a real kernel): shown as
text in the agent cell with Accept focused, Enter accepts, Esc rejects, and the reopened
notebook shows each diff and its decision with no kernel. The notebook changed is one held
in the kernel (tests/helpers/fake_notebook.py): applying it to JupyterLab's own notebook
model is the bridge's, tested with it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from test_browser_control_keys import FOCUSED_JS
from test_browser_controls import Lab, Page, _button, _save, _set_theme, shown_on_failure
from test_notebook_cell_changes import NOTEBOOK

from helpers import lab as shared
from helpers.openai_server import text_reply, tool_call, tool_calls_reply

pytestmark = pytest.mark.xdist_group("browser")

CELLS = [
    NOTEBOOK,
    "%load_ext tiny_agent_nb",
    "%%agent\nFix the total.",
    "%%agent\nDrop the old cell.",
    "print([c.source for c in nb.cells])",
]
DIFF = "cell c1\n@@ -1 +1 @@\n-total = price * qty\\u200b\n+total = 2"


@pytest.fixture(scope="module")
def lab(lab: shared.Lab, browser: Any) -> Iterator[Lab]:
    yield Lab(lab.lab, lab.server, browser)


def test_a_diff_is_accepted_or_rejected_from_the_keyboard_and_kept_as_text(lab: Lab) -> None:
    p = lab.open("cell-changes", CELLS)
    with shown_on_failure(p, "cell-changes"):
        _check(p)
    p.page.close()


def _check(p: Page) -> None:
    p.run(0)
    p.idle()
    p.run(1)
    p.idle()
    p.server.enqueue(
        tool_calls_reply(tool_call("e1", "edit_cell", {"cell_id": "c1", "source": "total = 2"})),
        text_reply("Changed."),
        tool_calls_reply(tool_call("d1", "delete_cell", {"cell_id": "c1"})),
        text_reply("Left it."),
    )
    p.run(2)
    _button(p, 2, "Accept")
    p.page.wait_for_function(FOCUSED_JS, arg=[2, "allow"])
    assert p.outputs(2).locator(".tan-control pre").inner_text() == DIFF
    p.screenshot("cell-change-diff-light.png", p.outputs(2))
    p.page.keyboard.press("Enter")
    accepted = p.outputs(2).locator(".tan-control-record", has_text="accepted by you")
    accepted.wait_for(state="visible")
    assert accepted.locator("pre").inner_text() == DIFF
    p.screenshot("cell-change-accepted-light.png", p.outputs(2))
    p.idle()

    _set_theme(p, "JupyterLab Dark")
    try:
        p.screenshot("cell-change-accepted-dark.png", p.outputs(2))
        p.run(3)
        _button(p, 3, "Reject")
        p.page.wait_for_function(FOCUSED_JS, arg=[3, "allow"])
        p.screenshot("cell-change-diff-dark.png", p.outputs(3))
        p.page.keyboard.press("Escape")
        p.outputs(3).locator(".tan-control-record", has_text="rejected by you").wait_for()
        p.idle()
    finally:
        _set_theme(p, "JupyterLab Light")
    p.run(4)
    p.idle()
    assert "['%%agent', 'total = 2', '%%agent\\nold']" in p.outputs(4).inner_text()

    _save(p.page, p.relative)
    for kernel in p.kernel_ids():
        httpx.delete(p.lab.url(f"api/kernels/{kernel}"), timeout=30)
    p.page.reload()
    p.page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    kept = p.outputs(2).locator(".tan-control-record", has_text="accepted by you")
    kept.wait_for(state="visible")
    assert kept.locator("pre").inner_text() == DIFF
    assert "delete_cell — rejected by you" in p.outputs(3).inner_text()
