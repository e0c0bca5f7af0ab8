"""A renamed notebook keeps its conversation, and a duplicated one gets its own, in real
JupyterLab (headless Chromium, a real kernel, the loopback model): docs/spec.md §10.

`Untitled.ipynb` runs an `%%agent` cell and is saved; renamed to `analysis.ipynb` from
JupyterLab's File menu, it runs again in the same kernel (which goes on writing the file
it opened), then in a restarted one (which Jupyter names after the new notebook: it
follows the link the saved outputs keep, and the session file is renamed after the
notebook). Every request carries the whole conversation. A copy of the notebook (the
contents API's copy, what JupyterLab's Duplicate calls) opened beside it gets a fork; the
original's file is not written by the copy's kernel. The timeline of the renamed notebook
is saved as `browser-renamed-timeline.png`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_browser import (
    STEP_TIMEOUT_MS,
    TIMELINE,
    Lab,
    LabSession,
    _lab,
    _save,
    _saved_cells,
    screenshot_on_failure,
)

from tiny_agent_nb.session import load_session

from helpers.lab import write_notebook
from helpers.openai_server import text_reply
from helpers.polling import wait_until

pytestmark = pytest.mark.xdist_group("browser")
PROMPT = "Remember the number 42."
# `--rerun`: each Run All asks the model again (unchanged, the cell would replay its run
# from the session), so every run here goes on with the conversation the file holds.
CELLS = ["%load_ext tiny_agent_nb", f"%%agent --rerun\n{PROMPT}", "%agent timeline"]


@pytest.fixture(scope="module")
def untitled(lab: Lab, browser: Any) -> Iterator[LabSession]:
    path = write_notebook(lab.directory("renamed") / "Untitled.ipynb", CELLS)
    lab.server.enqueue(text_reply("I will remember 42."))
    with _lab(lab, path, [], [], browser) as session:
        yield session


def _connected(lab: Lab, path: str) -> bool:
    """The server's view: `path`'s kernel has the browser's websocket attached and is idle
    (under load the server may answer an error object instead of the list: not yet)."""
    sessions = httpx.get(lab.lab.url("api/sessions"), timeout=5).json()
    return isinstance(sessions, list) and any(
        x["path"] == path
        and x["kernel"]["connections"] >= 1
        and x["kernel"]["execution_state"] == "idle"
        for x in sessions
    )


def _menu(s: LabSession, menu: str, command: str) -> None:
    s.page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=re.compile(f"^{menu}$")).click()
    s.page.locator(f'.lm-Menu-item[data-command="{command}"]').click()


def _save_with(s: LabSession, path: Path, answer: str) -> None:
    """File > Save of the notebook now at `path`; the file holds the latest answer."""
    _save(s.page, path.relative_to(s.lab.root).as_posix())
    cells = _saved_cells(path)
    assert answer in json.dumps(cells), f"{path.name} saved without {answer!r}: {cells}"


def _runs_shown(s: LabSession, runs: int) -> None:
    """The last timeline output shows `runs` runs, and the kernel is idle."""
    s.page.wait_for_function(
        """([selector, runs]) => {
          const views = document.querySelectorAll(selector);
          const view = views[views.length - 1];
          const idle = document.querySelector(
            '.jp-Notebook-ExecutionIndicator[data-status="idle"]');
          return view && idle && view.querySelectorAll('.tan-run').length === runs;
        }""",
        arg=[TIMELINE, runs],
        timeout=STEP_TIMEOUT_MS,
    )


NOTICE = "[Kernel restarted]"


def _turns(body: dict[str, Any]) -> list[tuple[str | None, str]]:
    """Each user turn sent: (the kernel notice that leads it, if one does; the prompt)."""
    turns: list[tuple[str | None, str]] = []
    for m in body["messages"]:
        if m["role"] == "user":
            notice, _, prompt = m["content"].partition("\n\n")
            led = m["content"].startswith(NOTICE) and bool(prompt)
            turns.append((notice, prompt) if led else (None, m["content"]))
    return turns


def _prompts(body: dict[str, Any]) -> list[str]:
    return [prompt for _, prompt in _turns(body)]


def test_a_renamed_notebook_keeps_its_conversation_with_and_without_a_restart(
    untitled: LabSession, lab: Lab
) -> None:
    s = untitled
    folder = s.root
    with screenshot_on_failure(s, "browser-renamed-failure.png"):
        _runs_shown(s, 1)
        _save_with(s, s.notebook, "I will remember 42.")
        session = load_session(folder / "Untitled.agent.jsonl")

        # File > Rename Notebook…, as a user renames it; the kernel keeps running.
        _menu(s, "File", "docmanager:rename")
        field = s.page.locator(".jp-Dialog input")
        field.fill("analysis.ipynb")
        s.page.locator(".jp-Dialog .jp-mod-accept").click()
        renamed = folder / "analysis.ipynb"
        wait_until(
            lambda: renamed.exists() and not s.notebook.exists(),
            STEP_TIMEOUT_MS / 1000,
            "renamed on disk",
        )

        # Without a restart: the same kernel goes on in the file it opened.
        lab.server.enqueue(text_reply("Still 42."))
        _menu(s, "Run", "runmenu:run-all")
        _runs_shown(s, 2)
        (second,) = s.model_requests()[1:]
        assert _prompts(second.body) == [PROMPT, PROMPT]
        assert (folder / "Untitled.agent.jsonl").exists()
        _save_with(s, renamed, "Still 42.")

        # A restart: Jupyter names the new process after the renamed notebook.
        lab.server.enqueue(text_reply("42, from before the restart."))
        _menu(s, "Kernel", "runmenu:restart-and-run-all")
        s.page.locator(".jp-Dialog .jp-mod-accept").click()
        _runs_shown(s, 3)
        text = s.notebook_text()
        assert (
            "this notebook was renamed or moved: its session Untitled.agent.jsonl is now "
            "analysis.agent.jsonl." in text
        ), text
        third = s.model_requests()[2]
        *asked, (notice, prompt) = _turns(third.body)
        assert [p for _, p in asked] == [PROMPT, PROMPT] and prompt == PROMPT
        assert notice is not None  # the restart, told in the prompt's turn
        assert not (folder / "Untitled.agent.jsonl").exists()
        state = load_session(folder / "analysis.agent.jsonl")
        assert state.header.id == session.header.id
        assert [k.notebook for k in state.kernels.values()] == ["Untitled.ipynb", "analysis.ipynb"]

        view = s.timeline()
        boundary = view.locator('.tan-kernel[data-kernel="2"]')
        assert "analysis.ipynb" in boundary.inner_text()
        boundary.locator("summary", has_text="the model was told it restarted").click()
        assert notice in boundary.locator("pre").inner_text()
        view.scroll_into_view_if_needed()
    s.screenshot("browser-renamed-timeline.png", TIMELINE)
    s.screenshot("browser-renamed-notebook.png")


def test_a_duplicated_notebook_gets_a_fork_and_never_writes_the_originals_file(
    untitled: LabSession, lab: Lab, browser: Any
) -> None:
    folder = untitled.root
    original = folder / "analysis.agent.jsonl"
    _save_with(untitled, folder / "analysis.ipynb", "42, from before the restart.")
    before = original.read_bytes()  # the original's kernel still runs, holding it
    relative = (folder / "analysis.ipynb").relative_to(lab.lab.root).as_posix()
    copied = httpx.post(
        lab.lab.url(f"api/contents/{folder.name}"), json={"copy_from": relative}, timeout=30
    )
    assert copied.status_code == 201, copied.text
    copy = copied.json()["path"]
    assert copy.endswith("/analysis-Copy1.ipynb"), copy

    lab.server.enqueue(text_reply("A copy also knows 42."))
    asked = len(lab.server.requests)
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    try:
        page.set_default_timeout(STEP_TIMEOUT_MS)
        # A workspace of its own: the original's would open its notebook beside the copy.
        page.goto(lab.lab.url(f"lab/workspaces/duplicate/tree/{copy}"))
        # Run All before the page's websocket is attached to the copy's kernel runs nothing:
        # wait for the server to see it connected and idle, as every other browser test does.
        wait_until(lambda: _connected(lab, copy), STEP_TIMEOUT_MS / 1000, what="copy's kernel")
        page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
        page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
        page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
        said = (
            "this notebook is a copy of analysis.ipynb: its conversation goes on in a fork, "
            "analysis-Copy1.agent.jsonl; analysis.agent.jsonl stays the other notebook's."
        )
        try:
            page.wait_for_function(
                """([said, selector]) => {
                  const text = document.querySelector('.jp-Notebook').innerText;
                  const views = document.querySelectorAll(selector);
                  const view = views[views.length - 1];
                  const idle = document.querySelector(
                    '.jp-Notebook-ExecutionIndicator[data-status="idle"]');
                  return text.includes(said) && idle && view
                    && view.querySelectorAll('.tan-run').length === 4;
                }""",
                arg=[said, TIMELINE],
            )
        except Exception:
            page.screenshot(path=str(untitled.artifacts / "browser-duplicated-failure.png"))
            raise
    finally:
        page.close()
    (request,) = lab.server.requests[asked:]
    turns = _turns(request.body)
    prompts = [prompt for _, prompt in turns]
    assert prompts.count(PROMPT) == 4 and prompts[-1] == PROMPT
    assert turns[-1][0] is not None  # the copy runs in a kernel of its own: told so
    fork = load_session(folder / "analysis-Copy1.agent.jsonl")
    assert fork.header.id != load_session(original).header.id
    assert original.read_bytes() == before  # the copy's kernel never wrote it
