"""The live notebook as the tools see it (notebook/_bridge.py), in real JupyterLab 4 and
Notebook 7 (headless Chromium, a real kernel, the loopback model server): read_notebook
sees a cell the user typed but neither ran nor saved, and marks the running agent cell;
a change applied from a running cell edits the cell without running it, the notebook's
undo (`z`) takes it back, and a change made from a source the cell no longer holds is
refused. Notebook 7 is the same Jupyter server's `/notebooks/` page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from helpers import lab as shared
from helpers.lab import STEP_TIMEOUT_MS, write_notebook
from helpers.openai_server import text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until

# One JupyterLab at a time on the worker that runs the browser modules.
pytestmark = pytest.mark.xdist_group("browser")

TYPED = "y = 'typed, not run'"
EDITED = "x = 42  # edited from the kernel"
APPLY = f"""\
from tiny_agent_nb.tools import CellChange
bridge = get_ipython().magics_manager.registry["AgentMagics"].runtime.loops.notebook
seen = bridge.read()
old = next(cell.source for cell in seen.cells if cell.id == "cell-1")
print("LIVE", seen.live, "OWN", seen.own_cell_id)
print("FIRST", bridge.apply(CellChange("edit", "cell-1", old, {EDITED!r})))
print("AGAIN", bridge.apply(CellChange("edit", "cell-1", old, "x = 0")))
print("GONE", bridge.apply(CellChange("delete", "no-such-cell", "", "")))"""
CELLS = ["%load_ext tiny_agent_nb", "x = 1", "%%agent\nWhat is in this notebook?", APPLY]


@pytest.fixture(scope="module")
def lab(lab: shared.Lab, browser: Any) -> Iterator[tuple[shared.Lab, Any]]:
    yield lab, browser


def _open(lab: shared.Lab, browser: Any, app: str) -> Any:
    root = lab.directory(f"bridge-{app}")
    notebook = write_notebook(root / "bridge.ipynb", CELLS)
    relative = notebook.relative_to(lab.lab.root).as_posix()
    page = browser.new_page(viewport={"width": 1200, "height": 1400})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    if app == "lab":
        page.goto(lab.lab.url(f"lab/workspaces/{root.name}/tree/{relative}"))
    else:
        page.goto(lab.lab.url(f"notebooks/{relative}"))
    page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content")

    def idle() -> bool:
        sessions = httpx.get(lab.lab.url("api/sessions"), timeout=5).json()
        return isinstance(sessions, list) and any(
            x["path"] == relative
            and x["kernel"]["connections"] >= 1
            and x["kernel"]["execution_state"] == "idle"
            for x in sessions
        )

    wait_until(idle, STEP_TIMEOUT_MS / 1000, "the notebook's kernel, idle", interval=0.2)
    return page


def _cell(page: Any, n: int) -> Any:
    return page.locator(".jp-Notebook .jp-Cell").nth(n)


def _source(page: Any, n: int) -> str:
    return str(_cell(page, n).locator(".cm-content").inner_text())


def _run(page: Any, n: int) -> None:
    """Run cell `n` as a user does (Ctrl+Enter in its editor); returns once it ran."""
    prompt = _cell(page, n).locator(".jp-InputArea-prompt")
    _cell(page, n).locator(".cm-content").click()
    page.keyboard.press("Control+Enter")
    prompt.filter(has_text=re.compile(r"\[\d+\]")).wait_for(state="attached")


@pytest.mark.parametrize("app", ["lab"])
def test_the_live_notebook_is_read_and_changed_as_the_user_has_it(
    lab: tuple[shared.Lab, Any], app: str
) -> None:
    shared_lab, browser = lab
    page = _open(shared_lab, browser, app)
    try:
        _run(page, 0)
        # The user types into cell 1 and neither runs nor saves it.
        _cell(page, 1).locator(".cm-content").click()
        page.keyboard.press("Control+End")
        page.keyboard.type("\n" + TYPED)
        page.keyboard.press("Escape")

        server = shared_lab.server
        sent = len(server.requests)
        server.enqueue(
            tool_calls_reply(tool_call("r1", "read_notebook", {})),
            text_reply("It sets x and y."),
        )
        _run(page, 2)
        page.get_by_text("It sets x and y.").wait_for()
        result = next(
            m
            for r in server.requests[sent:]
            for m in r.body["messages"]
            if m.get("role") == "tool" and m.get("tool_call_id") == "r1"
        )["content"]
        assert result.startswith("[notebook: 4 cells; live: as the notebook shows them")
        assert f"cell 2 of 4 · id cell-1 · code · not run\n```python\nx = 1\n{TYPED}\n```" in result
        assert "cell 3 of 4 · id cell-2 · code · not run · the running agent cell" in result

        prompt = _cell(page, 1).locator(".jp-InputArea-prompt").inner_text()
        _run(page, 3)
        output = _cell(page, 3).locator(".jp-OutputArea").inner_text()
        assert "LIVE True OWN cell-3" in output
        assert "FIRST applied" in output
        assert "AGAIN changed" in output  # made from what the cell no longer holds
        assert "GONE missing" in output
        assert _source(page, 1) == EDITED
        assert _cell(page, 1).locator(".jp-InputArea-prompt").inner_text() == prompt  # not run

        # The notebook's undo (command mode `z`) takes the change back.
        _cell(page, 1).locator(".jp-InputArea-prompt").click()
        page.keyboard.press("Escape")
        page.keyboard.press("z")
        page.wait_for_function(
            "([n, typed]) => document.querySelectorAll('.jp-Notebook .jp-Cell')[n]"
            ".querySelector('.cm-content').innerText.includes(typed)",
            arg=[1, TYPED],
        )
        assert _source(page, 1) == f"x = 1\n{TYPED}"
    except BaseException:
        page.screenshot(path=str(shared.artifacts_dir() / f"bridge-failure-{app}.png"))
        raise
    finally:
        page.close()
