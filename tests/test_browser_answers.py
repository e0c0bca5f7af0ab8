"""What the agent hands back, in a real browser (JupyterLab + headless Chromium + a real
kernel, tests/helpers/lab.py): a prompt-injected model's answer shows as text and runs
nothing, also after the saved notebook is reopened; a proposed cell appears below the
agent cell with its code, not run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.lab import (
    STEP_TIMEOUT_MS,
    Lab,
    LabSession,
    _code_cell,
    _lab,
    _save,
    _saved_cells,
    screenshot_on_failure,
)
from helpers.openai_server import (
    text_reply,
    tool_call,
    tool_calls_reply,
)
from helpers.polling import wait_until

# The tests share one JupyterLab server, one model server and Chromium (starting each is
# most of the module's CPU), each session its own notebook in its own directory, its own
# page and kernel; they run in order (a later test reopens what an earlier one saved): one
# worker runs them all in a parallel run.
pytestmark = pytest.mark.xdist_group("browser")


# ---------------------------------------------------------------- a hostile model

# What a prompt-injected model might answer: each line would run script, make a request
# or plant a live link in a trusted output (and again when the saved notebook is opened:
# Jupyter signs a notebook whose outputs it trusts). The fetch writes pwned.txt through
# the contents API with the page's XSRF cookie, as an attack would.
ATTACK_JS = (
    "window.__pwned=1;fetch('/api/contents/pwned.txt',{method:'PUT',headers:{'X-XSRFToken':"
    "document.cookie.split('_xsrf=')[1].split(';')[0],'Content-Type':'application/json'},"
    "body:JSON.stringify({type:'file',format:'text',content:'pwned'})})"
)
HOSTILE_ANSWER = "\n\n".join(
    [
        f'Summary. <img src=x onerror="{ATTACK_JS}">',
        "<script>window.__pwned='script'</script>",
        "<iframe src=\"javascript:window.__pwned='iframe'\"></iframe>",
        "[click me](javascript:window.__pwned='link') and [ref link][r]",
        "[r]: javascript:window.__pwned='reference'",
        "![exfil](http://127.0.0.1:9/exfil.png?secret=1) ![svg](data:image/svg+xml,x)",
        "$\\href{javascript:window.__pwned='math'}{math link}$ "
        "$\\style{background:url(http://127.0.0.1:9/exfil-css.png)}{styled}$",
        "- a list item\n\n  ```\n  <b>bold in code</b>\n  ```",
        # JupyterLab puts LaTeX back after markdown, quotes unescaped: inside an attribute
        "![$\" onerror=\"window.__pwned='alt'//$](plot.png) "
        "[quoted](https://example.com/$\" onmouseover=\"window.__pwned='href'//$)",
    ]
)
HOSTILE_PATH = (
    "<img src=y onerror=\"window.__pwned='tool'\"> javascript://%0Awindow.__pwned='toollink'"
)
SHOWN_AS_TEXT = (
    "Summary. <img src=x onerror=",
    "<script>window.__pwned='script'</script>",
    "<iframe src=",
    "click me",
    "<b>bold in code</b>",
    "window.__pwned='tool'",  # the tool's argument, in the tool line and the timeline
)
UNSAFE_HREF = re.compile(r"^\s*(javascript|data|vbscript|file):", re.IGNORECASE)


@pytest.fixture(scope="module")
def hostile_session(lab: Lab, browser: Any) -> Iterator[LabSession]:
    root = lab.directory("hostile")
    notebook = {
        "cells": [
            _code_cell(0, "%load_ext tiny_agent_nb"),
            _code_cell(1, "%%agent\nSummarise this directory."),
            _code_cell(2, "%agent timeline"),
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = root / "hostile.ipynb"
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    lab.server.enqueue(
        tool_calls_reply(tool_call("call_0", "list_files", {"path": HOSTILE_PATH})),
        text_reply(HOSTILE_ANSWER),
    )
    with _lab(lab, path, [], [], browser) as session:
        yield session


def test_a_hostile_answer_shows_as_text_and_runs_nothing_also_after_reopening(
    hostile_session: LabSession,
) -> None:
    s = hostile_session
    with screenshot_on_failure(s, "browser-hostile-failure.png"):
        answer = s.page.locator(".jp-RenderedMarkdown", has_text="click me")
        answer.wait_for(state="visible")
        _check_inert(s, answer)
        s.screenshot("browser-hostile.png")

        # Save (Jupyter signs the notebook, so its outputs are trusted when reopened),
        # then open it again from disk.
        _save(s.page, s.relative)
        saved = _saved_answer(s.notebook)
        assert "<img" not in saved and "](javascript:" not in saved, saved
        s.page.reload()
        answer = s.page.locator(".jp-RenderedMarkdown", has_text="click me")
        answer.wait_for(state="visible")
        # the reopened output is trusted: raw HTML in it would run
        assert "jp-mod-trusted" in (answer.get_attribute("class") or "")
        _check_inert(s, answer)
        s.screenshot("browser-hostile-reopened.png")


def _check_inert(s: LabSession, answer: Any) -> None:
    page = s.page
    # An absence cannot be polled: wait until every image has loaded or failed (an
    # onerror handler is then due), then for the tasks queued before ours to run (the
    # handler, which sets window.__pwned first).
    page.wait_for_function("() => [...document.images].every(i => i.complete)")
    page.evaluate("() => new Promise(done => setTimeout(() => setTimeout(done)))")
    assert page.evaluate("() => window.__pwned") is None
    # the fetch writes at the lab's root (the contents API's path is absolute)
    assert not (s.lab.root / "pwned.txt").exists()
    assert not (s.root / "pwned.txt").exists()
    attacks = [r for r in s.requests if "pwned" in r[1] or "exfil" in r[1]]
    assert attacks == [], attacks
    # nothing of it became an element or a live link
    found = page.locator(".jp-Notebook").evaluate(
        """n => ({
          elements: n.querySelectorAll('script, iframe, object, embed').length,
          images: [...n.querySelectorAll('img')].map(i => i.getAttribute('src')),
          handlers: [...n.querySelectorAll('*')].flatMap(
            e => e.getAttributeNames().filter(a => a.startsWith('on'))),
          hrefs: [...n.querySelectorAll('[href], [src], [xlink\\\\:href]')].map(
            e => e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('xlink:href')),
          linked: [...n.querySelectorAll('a')].filter(a => a.textContent.includes('click')).length,
        })"""
    )
    assert found["elements"] == 0, found
    assert found["handlers"] == [], found
    # the one image kept is the relative one, served by JupyterLab from beside the notebook
    kept = [src.split("?")[0] for src in found["images"]]
    beside = s.root.relative_to(s.lab.root).as_posix()
    assert kept == [f"http://127.0.0.1:{s.lab.port}/files/{beside}/plot.png"], found
    assert not [h for h in found["hrefs"] if h and UNSAFE_HREF.match(h)], found
    assert found["linked"] == 0, found
    # the model's markup is there to read, as text
    text = s.notebook_text()
    for shown in SHOWN_AS_TEXT:
        assert shown in text, f"{shown!r} is not shown; the notebook shows:\n{text}"
    assert answer.locator("pre code", has_text="<b>bold in code</b>").count() == 1


def _saved_answer(path: Path) -> str:
    """The answer's text/markdown as saved on disk."""
    cells = _saved_cells(path)
    markdown = [
        "".join(o["data"]["text/markdown"])
        for o in (cells[1].get("outputs", []) if cells else [])
        if "text/markdown" in o.get("data", {})
    ]
    assert markdown, f"{path.name} was saved without the answer"
    return markdown[-1]


# ---------------------------------------------------------------- a cell handed back

PROPOSED_CODE = (
    "# Review before running. <img src=x onerror=\"window.__pwned='proposed'\">\n"
    "totals = {'north': 1.5 + 4.0, 'south': 2.0}\n"
    "totals"
)


@pytest.fixture(scope="module")
def proposal_session(lab: Lab, browser: Any) -> Iterator[LabSession]:
    root = lab.directory("proposal")
    notebook = {
        "cells": [
            _code_cell(0, "%load_ext tiny_agent_nb"),
            _code_cell(1, "%%agent\nSum the totals per region, in a cell I can review."),
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = root / "proposal.ipynb"
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    lab.server.enqueue(
        tool_calls_reply(tool_call("call_0", "propose_cell", {"code": PROPOSED_CODE})),
        text_reply("The sums are in the cell below; run it when it looks right."),
    )
    with _lab(lab, path, [], [], browser, proposed=1) as session:
        yield session


def test_a_proposed_cell_appears_below_the_agent_cell_with_its_code_not_run(
    proposal_session: LabSession,
) -> None:
    s = proposal_session
    with screenshot_on_failure(s, "browser-proposal-failure.png"):
        cells = s.page.locator(".jp-Notebook .jp-CodeCell")
        wait_until(lambda: cells.count() == 3, STEP_TIMEOUT_MS / 1000, "the proposed cell inserted")
        proposed = cells.nth(2)
        source = proposed.locator(".jp-InputArea-editor .cm-content").inner_text()
        assert source == PROPOSED_CODE
        # Below the agent cell, and not run: no execution count, no output.
        assert "%%agent" in cells.nth(1).locator(".jp-InputArea-editor").inner_text()
        prompt = proposed.locator(".jp-InputArea-prompt").inner_text()
        assert not re.search(r"\d", prompt), prompt
        assert proposed.locator(".jp-OutputArea-output").count() == 0
        # Code in an editor is text: the markup in its comment made no element.
        s.page.wait_for_timeout(500)  # an onerror handler fires within milliseconds
        assert s.page.evaluate("() => window.__pwned") is None
        assert proposed.locator("img").count() == 0
        assert "of code as a new cell" not in s.notebook_text()  # the result is the model's
        assert "run it when it looks right" in s.notebook_text()
    proposed.scroll_into_view_if_needed()
    s.screenshot("browser-proposed-cell.png", ".jp-NotebookPanel .jp-WindowedPanel-viewport")
