"""The live notebook as the tools see it (notebook/_bridge.py), in real JupyterLab 4 and
Notebook 7 (headless Chromium, a real kernel, the loopback model server): read_notebook
sees a cell the user typed but neither ran nor saved, and marks the running agent cell;
a change applied from a running cell edits the cell without running it, the notebook's
undo (`z`) takes it back, and a change made from a source the cell no longer holds is
refused. Notebook 7 is the same Jupyter server's `/notebooks/` page."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from helpers import lab as shared
from helpers.browser_helpers import JupyterLab, artifacts_dir, in_ci, notebook7_python
from helpers.lab import STEP_TIMEOUT_MS, write_notebook
from helpers.openai_server import MODEL, text_reply, tool_call, tool_calls_reply
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
def servers(lab: shared.Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """The test process's JupyterLab, and a Notebook 7 server started lazily beside it
    (its kernels use the same model server)."""
    with ExitStack() as stack:

        def notebook7() -> JupyterLab:
            python = notebook7_python()
            if python is None:
                reason = "Notebook 7 is not installed (pip install notebook>=7)"
                if in_ci():
                    pytest.fail(f"{reason}; CI=true, so the browser test must run")
                pytest.skip(reason)
            base = tmp_path_factory.mktemp("notebook7")
            (base / "root").mkdir()
            env: dict[str, str | None] = {
                "TINY_AGENT_BASE_URL": lab.server.base_url,
                "TINY_AGENT_MODEL": MODEL,
                "TINY_AGENT_API_KEY": None,
                "OPENROUTER_API_KEY": None,
                "JPY_SESSION_NAME": None,
            }
            server = JupyterLab(
                base / "root",
                base / "jupyter",
                env=env,
                log_path=artifacts_dir() / "browser-notebook7.log",
                startup_timeout=STEP_TIMEOUT_MS / 1000,
                app="notebook",
                python=python,
            )
            return stack.enter_context(server)

        yield Servers(lab, notebook7)


@dataclass
class Servers:
    lab: shared.Lab
    start_notebook7: Callable[[], JupyterLab]

    def get(self, app: str) -> JupyterLab:
        return self.lab.lab if app == "lab" else self.start_notebook7()


def _open(server: JupyterLab, browser: Any, app: str) -> Any:
    root = server.root / f"bridge-{app}"
    root.mkdir()
    notebook = write_notebook(root / "bridge.ipynb", CELLS)
    relative = notebook.relative_to(server.root).as_posix()
    page = browser.new_page(viewport={"width": 1200, "height": 1400})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    if app == "lab":
        page.goto(server.url(f"lab/workspaces/{root.name}/tree/{relative}"))
    else:
        page.goto(server.url(f"notebooks/{relative}"))
    page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content")

    def idle() -> bool:
        sessions = httpx.get(server.url("api/sessions"), timeout=5).json()
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


@pytest.mark.parametrize("app", ["lab", "notebook"])
def test_the_live_notebook_is_read_and_changed_as_the_user_has_it(
    servers: Servers, browser: Any, app: str
) -> None:
    page = _open(servers.get(app), browser, app)
    try:
        _run(page, 0)
        # The user types into cell 1 and neither runs nor saves it.
        _cell(page, 1).locator(".cm-content").click()
        page.keyboard.press("Control+End")
        page.keyboard.type("\n" + TYPED)
        page.keyboard.press("Escape")

        server = servers.lab.server
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
        page.screenshot(path=str(artifacts_dir() / f"bridge-failure-{app}.png"))
        raise
    finally:
        page.close()
