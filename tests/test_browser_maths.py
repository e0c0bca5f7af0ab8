"""`$` amounts in real JupyterLab: shown as written, never typeset as maths, except the
maths a model writes on purpose.

JupyterLab typesets `$...$` pairs with MathJax in every HTML and markdown output (not in
stream text): a prompt "The budget is $5 per day and we spent $3" showed in the timeline
as italic maths, and so did the budget's stop line. A notebook with a budget-stopped
run, an answer that mixes amounts and maths, a failed run, the timeline, `%agent status`
and `%agent usage` is run, then saved and reopened with its kernel shut down. MathJax
renders into `mjx-container` elements: the answer's two formulas are the only ones.
Screenshots of the timeline in the light and the dark theme go to the artifacts
directory (tests/helpers/browser_helpers.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from helpers.lab import (
    TIMELINE,
    Lab,
    LabSession,
    _code_cell,
    _lab,
    _save,
    _saved_cells,
    _set_theme,
    screenshot_on_failure,
)
from helpers.openai_server import error_reply, text_reply, tool_call, tool_calls_reply, usage

pytestmark = pytest.mark.xdist_group("browser")

PROMPT = "The budget is $5 per day and we spent $3.\nList the files."
STOP = "budget $0.001 reached: this run spent $0.002"
AMOUNTS = "It costs $5 per day and we spent $3, so between $5 and $10 a week."
ANSWER = f"{AMOUNTS} On purpose: $\\pi r^2$ and $$\\sum_{{i=1}}^{{n}} i$$"
REFUSED = "a price of $5 is over the $3 limit"
CELLS = [
    "%load_ext tiny_agent_nb",
    f"%%agent --budget 0.001\n{PROMPT}",
    "%%agent\nWhat do they come to?",
    "%%agent\nAnd in euros?",
    "%agent timeline",
    "%agent status",
    "%agent usage",
]


@pytest.fixture(scope="module")
def maths_session(lab: Lab, browser: Any) -> Iterator[LabSession]:
    root = lab.directory("maths")
    notebook = {
        "cells": [_code_cell(n, source) for n, source in enumerate(CELLS)],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = root / "maths.ipynb"
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    lab.server.enqueue(
        # priced past the budget: the run stops before the tool call
        tool_calls_reply(tool_call("call_0", "list_files", {"path": "."}), usage=usage(cost=0.002)),
        text_reply(ANSWER),
        error_reply(400, REFUSED),
    )
    with _lab(lab, path, [], [], browser) as session:
        yield session


def test_dollar_amounts_show_as_written_and_only_maths_is_typeset_also_after_reopening(
    maths_session: LabSession,
) -> None:
    s = maths_session
    with screenshot_on_failure(s, "browser-maths-failure.png"):
        _check_dollars(s)
        view = s.timeline()
        view.scroll_into_view_if_needed()
        try:
            for theme in ("JupyterLab Light", "JupyterLab Dark"):
                _set_theme(s, theme)
                s.screenshot(f"maths-timeline-{theme.split()[-1].lower()}.png", TIMELINE)
        finally:  # the theme is a setting of the shared lab: later sessions open in light
            _set_theme(s, "JupyterLab Light")
        s.screenshot("maths-answer.png", ".jp-OutputArea-output.jp-RenderedMarkdown")

        _save(s.page, s.relative)
        assert _saved_with_timeline(s), _saved_cells(s.notebook)
        for kernel in s.kernel_ids():
            httpx.delete(s.lab.url(f"api/kernels/{kernel}"), timeout=30)
        assert s.kernel_ids() == []
        s.page.reload()
        _check_dollars(s)
        s.screenshot("maths-reopened.png", TIMELINE)


def _saved_with_timeline(s: LabSession) -> bool:
    for cell in _saved_cells(s.notebook) or []:
        for output in cell.get("outputs", []):
            if "tan-timeline" in "".join(output.get("data", {}).get("text/html", "")):
                return True
    return False


def _check_dollars(s: LabSession) -> None:
    page = s.page
    # The answer's maths is typeset: MathJax has run over this page's outputs.
    answer = page.locator(".jp-RenderedMarkdown", has_text="It costs")
    answer.locator("mjx-container").nth(1).wait_for(state="attached")
    view = s.timeline()
    view.locator(".tan-run").nth(2).wait_for(state="visible")
    # Stream text (the stop line, the failure, status, usage) is not typeset by
    # JupyterLab: the answer's two formulas are the only maths in the notebook.
    typeset = {
        "answer": answer.locator("mjx-container").count(),
        "timeline": view.locator("mjx-container").count(),
        "notebook": page.locator(".jp-Notebook mjx-container").count(),
    }
    assert typeset == {"answer": 2, "timeline": 0, "notebook": 2}, typeset
    assert AMOUNTS in answer.inner_text()
    shown = " ".join(view.inner_text().split())
    assert "The budget is $5 per day and we spent $3. …" in shown, shown
    assert STOP in shown and REFUSED in shown, shown
    text = " ".join(s.notebook_text().split())
    for line in (f"‖ {STOP}", REFUSED, "cost $0.002"):
        assert line in text, (line, text)
