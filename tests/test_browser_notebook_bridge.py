"""The agent reads and changes the live notebook (notebook/_bridge.py, tools/_cells.py)
in real JupyterLab 4 and Notebook 7 (headless Chromium, a real kernel, the loopback model
server), on one page per app: read_notebook sees a cell the user typed but neither ran nor
saved, and marks the running agent cell; edit_cell's diff is shown as text with Accept
focused, Enter accepts, and the cell holds the new source without running; the notebook's
undo (`z`) takes it back; Esc rejects and nothing changes; a cell the user changed (or
deleted) between the diff and Accept is refused and the model told; insert_cell and
delete_cell are applied, and `%agent rewind` puts them back; the reopened notebook with
no kernel shows each diff and its decision (JupyterLab). Light and dark screenshots of a
diff before and after Accept go to artifacts_dir(). Notebook 7 is the same Jupyter
server's `/notebooks/` page."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from test_browser_control_keys import FOCUSED_JS

from helpers import lab as shared
from helpers.browser_helpers import JupyterLab, artifacts_dir, in_ci, notebook7_python
from helpers.lab import STEP_TIMEOUT_MS, _save, _set_theme, write_notebook
from helpers.openai_server import MODEL, text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until

# One JupyterLab at a time on the worker that runs the browser modules.
pytestmark = pytest.mark.xdist_group("browser")

TYPED = "y = 2"
# cell-1 holds a character the diff shows escaped; the user adds TYPED to it, unsaved.
CELLS = [
    "%load_ext tiny_agent_nb",
    "x = 1\u200b",
    "%%agent\nFix the cell.",
    "%%agent\nTry again.",
    "%%agent\nOnce more.",
    "%%agent\nAdd one, drop one.",
    "old = 1",
]
DIFF = "cell 2 of 7 (id cell-1)\n@@ -1,2 +1 @@\n-x = 1\\u200b\n-y = 2\n+x = 42"


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


def _button(page: Any, n: int, label: str) -> Any:
    button = _outputs(page, n).locator(".tan-control button", has_text=re.compile(f"^{label}$"))
    button.wait_for(state="visible")
    return button


def _outputs(page: Any, n: int) -> Any:
    return _cell(page, n).locator(".jp-OutputArea")


def _start(page: Any, n: int) -> None:
    """Run cell `n` (Shift+Enter in command mode); returns once the kernel took it."""
    prompt = _cell(page, n).locator(".jp-InputArea-prompt")
    prompt.click()
    page.keyboard.press("Escape")
    page.keyboard.press("Shift+Enter")
    prompt.filter(has_text=re.compile(r"\[(\*|\d+)\]")).wait_for(state="attached")


def _edit(call: str, source: str) -> Any:
    return tool_calls_reply(tool_call(call, "edit_cell", {"cell_id": "cell-1", "source": source}))


def _told(server: Any, sent: int, call: str) -> str:
    """What the model was told of tool call `call`, in the requests since `sent`."""
    return str(
        next(
            m
            for r in server.requests[sent:]
            for m in r.body["messages"]
            if m.get("role") == "tool" and m.get("tool_call_id") == call
        )["content"]
    )


def _shot(page: Any, app: str, name: str, n: int) -> None:
    if app == "lab":
        path = artifacts_dir() / f"{name}.png"
        _outputs(page, n).screenshot(path=str(path))
        print(f"screenshot: {path}")


@pytest.mark.parametrize("app", ["lab", "notebook"])
def test_the_live_notebook_is_read_and_changed_as_the_user_has_it(
    servers: Servers, browser: Any, app: str
) -> None:
    jupyter = servers.get(app)
    page = _open(jupyter, browser, app)
    try:
        _check(page, servers.lab.server, app)
        if app == "lab":
            _reopened(page, jupyter)
    except BaseException:
        page.screenshot(path=str(artifacts_dir() / f"bridge-failure-{app}.png"))
        raise
    finally:
        page.close()


def _check(page: Any, server: Any, app: str) -> None:
    _run(page, 0)
    # The user types into cell 1 and neither runs nor saves it.
    _cell(page, 1).locator(".cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.type("\n" + TYPED)
    page.keyboard.press("Escape")
    typed = _source(page, 1)
    prompt = _cell(page, 1).locator(".jp-InputArea-prompt").inner_text()

    # Read, then edit → the diff → Enter accepts: the cell holds it, unexecuted.
    sent = len(server.requests)
    server.enqueue(
        tool_calls_reply(tool_call("r1", "read_notebook", {})),
        _edit("e1", "x = 42"),
        text_reply("Changed."),
    )
    _start(page, 2)
    _button(page, 2, "Accept")
    page.wait_for_function(FOCUSED_JS, arg=[2, "allow"])
    assert _outputs(page, 2).locator(".tan-control pre").inner_text() == DIFF
    _shot(page, app, "cell-change-diff-light", 2)
    page.keyboard.press("Enter")
    _outputs(page, 2).get_by_text("Changed.").wait_for()
    _shot(page, app, "cell-change-accepted-light", 2)
    read = _told(server, sent, "r1")
    assert read.startswith("[notebook: 7 cells; live: as the notebook shows them")
    assert "cell 2 of 7 · id cell-1 · code · not run\n```python\nx = 1" in read
    assert f"{TYPED}\n```\ncell 3 of 7" in read
    assert "cell 3 of 7 · id cell-2 · code · not run · the running agent cell" in read
    assert _told(server, sent, "e1").startswith("The user accepted the change. Cell cell-1 now")
    assert _source(page, 1) == "x = 42"
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
    assert _source(page, 1) == typed

    if app == "lab":
        _set_theme(SimpleNamespace(page=page), "JupyterLab Dark")
    try:
        # Esc rejects: nothing changes.
        sent = len(server.requests)
        server.enqueue(
            tool_calls_reply(
                tool_call("e2", "edit_cell", {"cell_id": "cell-1", "source": "x = 2"})
            ),
            text_reply("Left it."),
        )
        _start(page, 3)
        _button(page, 3, "Reject")
        page.wait_for_function(FOCUSED_JS, arg=[3, "allow"])
        page.keyboard.press("Escape")
        _outputs(page, 3).get_by_text("Left it.").wait_for()
        assert _told(server, sent, "e2").startswith("The user rejected this change")
        assert _source(page, 1) == typed

        # The user changes the cell between the diff and Accept: refused, the model told.
        sent = len(server.requests)
        server.enqueue(
            tool_calls_reply(
                tool_call("e3", "edit_cell", {"cell_id": "cell-1", "source": "x = 3"})
            ),
            text_reply("It changed."),
        )
        _start(page, 4)
        accept = _button(page, 4, "Accept")
        _cell(page, 1).locator(".cm-content").click()
        page.keyboard.press("Control+End")
        page.keyboard.type("  # mine")
        page.keyboard.press("Escape")
        accept.click()
        _outputs(page, 4).get_by_text("It changed.").wait_for()
        assert "cell cell-1 changed since the diff was made" in _told(server, sent, "e3")
        assert _source(page, 1) == f"{typed}  # mine"

        # Insert after the last cell, then delete that cell: each accepted. Then a delete
        # of a cell the user deleted between the diff and Accept: refused as gone.
        sent = len(server.requests)
        server.enqueue(
            tool_calls_reply(
                tool_call("i1", "insert_cell", {"after_cell_id": "cell-6", "source": "new = 1"})
            ),
            tool_calls_reply(tool_call("d1", "delete_cell", {"cell_id": "cell-6"})),
            tool_calls_reply(tool_call("d2", "delete_cell", {"cell_id": "cell-1"})),
            text_reply("Moved."),
        )
        _start(page, 5)
        _button(page, 5, "Accept")
        page.wait_for_function(FOCUSED_JS, arg=[5, "allow"])
        _shot(page, app, "cell-change-diff-dark", 5)
        page.keyboard.press("Enter")
        accepted = _outputs(page, 5).locator(".tan-control-record", has_text="accepted by you")
        accepted.first.wait_for()
        _cell(page, 7).wait_for()
        _button(page, 5, "Accept")
        page.wait_for_function(FOCUSED_JS, arg=[5, "allow"])
        page.keyboard.press("Enter")
        accepted.nth(1).wait_for()
        _shot(page, app, "cell-change-accepted-dark", 5)
        _button(page, 5, "Accept")
        page.wait_for_function(FOCUSED_JS, arg=[5, "allow"])
        _cell(page, 1).locator(".jp-InputArea-prompt").click()
        page.keyboard.press("Escape")
        page.keyboard.press("d")
        page.keyboard.press("d")
        page.wait_for_function(
            "() => document.querySelectorAll('.jp-Notebook .jp-Cell').length === 6"
        )
        _button(page, 4, "Accept").click()  # the agent cell, one up now
        _outputs(page, 4).get_by_text("Moved.").wait_for()
        assert _told(server, sent, "i1").startswith("The user accepted the change. A new code")
        assert _told(server, sent, "d1") == "The user accepted the change. Cell cell-6 was deleted."
        assert "cell cell-1 is gone since the diff was made" in _told(server, sent, "d2")
        assert _source(page, 5) == "new = 1"
    finally:
        if app == "lab":
            _set_theme(SimpleNamespace(page=page), "JupyterLab Light")

    # `%agent rewind 4` (before the last run) puts its cells back through the live
    # notebook: cell-6 again after the cell it followed, the inserted cell gone.
    _cell(page, 5).locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    _cell(page, 6).locator(".cm-content").click()
    page.keyboard.type("%agent rewind 4 --yes")
    _start(page, 6)
    rewound = page.locator(".jp-Notebook .jp-Cell", has_text="%agent rewind 4 --yes")
    rewound.locator(".jp-OutputArea").get_by_text("(id cell-6): restored").wait_for()
    output = rewound.locator(".jp-OutputArea").inner_text()
    assert "cells to restore (2):" in output
    assert output.count(": restored") == 2, output
    assert [_source(page, n) for n in (4, 5)] == ["%%agent\nAdd one, drop one.", "old = 1"]
    assert "new = 1" not in [_source(page, n) for n in range(page.locator(".jp-Cell").count())]


def _reopened(page: Any, jupyter: JupyterLab) -> None:
    """Saved, its kernel gone, reloaded: each diff and its decision, as text."""
    relative = "bridge-lab/bridge.ipynb"
    _save(page, relative)
    sessions = httpx.get(jupyter.url("api/sessions"), timeout=5).json()
    for kernel in [x["kernel"]["id"] for x in sessions if x["path"] == relative]:
        httpx.delete(jupyter.url(f"api/kernels/{kernel}"), timeout=30)
    page.reload()
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    kept = _outputs(page, 1).locator(".tan-control-record", has_text="accepted by you")
    kept.wait_for(state="visible")  # the agent cells are one up: the user deleted cell 1
    assert kept.locator("pre").inner_text() == DIFF
    assert "edit_cell — rejected by you" in _outputs(page, 2).inner_text()
