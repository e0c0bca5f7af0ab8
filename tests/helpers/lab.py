"""One JupyterLab and one headless Chromium for the browser test modules of a test process
(started once, in tests/conftest.py: each start is seconds of CPU), and a page of it per
session: its own notebook in its own directory, opened and run (Run > Run All Cells), with
what a user would see of it read back (tests/test_browser.py, test_browser_answers.py,
test_browser_maths.py, test_browser_renamed_notebook.py, test_browser_run_all.py;
test_browser_controls.py opens its own pages in the same JupyterLab).

Needs Debian's `chromium-headless-shell` or `chromium` (tests/helpers/browser_helpers.py
prefers the first; `playwright install` is not used). Without either the tests are
skipped, except under CI=true, where they fail.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest

from helpers.browser_helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    JupyterLab,
    artifacts_dir,
    in_ci,
)
from helpers.openai_server import (
    MODEL,
    OpenAIServer,
)

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright
except ImportError:  # a test extra; _require() decides between skip and fail
    sync_playwright = None
    PlaywrightTimeout = TimeoutError

# Every wait is for an event (a selector, a response, a request); this bounds each
# against a hang, it is not a measure. A healthy quiet run needs seconds; on a loaded
# 2-core machine (the whole suite, or a user's JupyterLab beside it) opening the notebook
# and starting its kernel took 48 s, JupyterLab 34 s to answer.
STEP_TIMEOUT_MS = 180_000
TIMELINE = ".jp-OutputArea-output:has(.tan-timeline)"
WIDGET_ERRORS = ("Error displaying widget", "Failed to load model class", "Model class")
# What the widget manager logs when it cannot show a widget, as console errors. Not
# JupyterLab's warnings about its own slow start on a loaded machine ("Plugin
# @jupyterlab/filebrowser-extension:widget took 5026.10ms to activate").
WIDGET_CONSOLE_ERROR = re.compile(r"^(error|pageerror):.*(widget|model class|model id)", re.I)

# Every code prompt shows an execution count and the kernel is idle, or the run stopped
# (no cell still queued) after at least one cell ran: an error must not cost a timeout.
RUN_FINISHED_JS = """() => {
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')];
  const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
  if (!prompts.length || !indicator || indicator.dataset.status !== 'idle') return false;
  const counted = prompts.filter(p => /\\[\\d+\\]/.test(p.textContent)).length;
  const queued = prompts.some(p => p.textContent.includes('*'));
  return counted === prompts.length || (counted > 0 && !queued);
}"""


def _require(condition: bool, reason: str) -> None:
    if condition:
        return
    if in_ci():
        pytest.fail(f"{reason}; CI=true, so the browser test must run", pytrace=False)
    pytest.skip(reason)


def _code_cell(n: int, source: str) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": f"cell-{n}",
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def write_notebook(path: Path, sources: list[str]) -> Path:
    """An nbformat 4.5 notebook at `path` whose code cells are `sources` (ids cell-0...),
    for the python3 kernel."""
    notebook = {
        "cells": [_code_cell(n, source) for n, source in enumerate(sources)],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    return path


# ---------------------------------------------------------------- the session


@dataclass
class LabSession:
    page: Any
    server: OpenAIServer
    lab: JupyterLab
    root: Path  # the notebook's own directory, inside the lab's root
    notebook: Path
    cells: list[str]
    tools: list[str]
    artifacts: Path
    first_request: int  # the shared model server's requests before this session's
    timings: dict[str, float] = field(default_factory=dict)
    console: list[str] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, url) of the page

    def screenshot(self, name: str, selector: str | None = None) -> Path:
        path = self.artifacts / name
        if selector is None:
            self.page.screenshot(path=str(path))
        else:
            self.page.locator(selector).last.screenshot(path=str(path))
        print(f"screenshot: {path}")
        return path

    @property
    def relative(self) -> str:
        """The notebook's path as JupyterLab names it (relative to the lab's root)."""
        return self.notebook.relative_to(self.lab.root).as_posix()

    def model_requests(self) -> list[Any]:
        """What this session's kernels asked the shared model server."""
        return self.server.requests[self.first_request :]

    def kernel_ids(self) -> list[str]:
        """The kernels of this notebook's sessions, as the server lists them."""
        sessions = httpx.get(self.lab.url("api/sessions"), timeout=5).json()
        return [x["kernel"]["id"] for x in sessions if x["path"] == self.relative]

    def notebook_text(self) -> str:
        return str(self.page.locator(".jp-Notebook").inner_text())

    def timeline(self) -> Any:
        """The latest timeline output (rich HTML, updated in place while the kernel runs)."""
        return self.page.locator(TIMELINE).last


@contextmanager
def chromium() -> Iterator[Any]:
    """The test process's one Chromium (the `browser` fixture, tests/conftest.py):
    Playwright's sync API allows one instance per thread."""
    _require(CHROMIUM.exists(), f"{CHROMIUM} is missing (apt-get install chromium-headless-shell)")
    _require(sync_playwright is not None, "the playwright package is not installed")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class Lab:
    """The module's JupyterLab, its kernels pointed at the module's model server."""

    lab: JupyterLab
    server: OpenAIServer

    def directory(self, name: str) -> Path:
        """A new directory of the lab's root, for one session's notebook."""
        path = self.lab.root / name
        path.mkdir()
        return path


@contextmanager
def shared_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The test process's one JupyterLab and model server (the `lab` fixture,
    tests/conftest.py), shared by the browser modules: each session has its own
    directory (`Lab.directory`), workspace, page and kernel, and counts only its own
    requests (`LabSession.first_request`)."""
    base = tmp_path_factory.mktemp("browser")
    root = base / "root"
    root.mkdir()
    started = time.monotonic()
    with OpenAIServer() as server:
        env: dict[str, str | None] = {
            "TINY_AGENT_BASE_URL": server.base_url,
            "TINY_AGENT_MODEL": MODEL,
            "TINY_AGENT_API_KEY": None,
            "OPENROUTER_API_KEY": None,
            "JPY_SESSION_NAME": None,
        }
        log_path = artifacts_dir() / "browser-jupyterlab.log"
        with JupyterLab(
            root,
            base / "jupyter",
            env=env,
            log_path=log_path,
            startup_timeout=STEP_TIMEOUT_MS / 1000,
        ) as jupyterlab:
            print(f"jupyterlab up in {time.monotonic() - started:.2f}s")
            yield Lab(jupyterlab, server)


@contextmanager
def _lab(
    lab: Lab,
    notebook_path: Path,
    cells: list[str],
    tools: list[str],
    browser: Any,
    *,
    proposed: int = 0,
) -> Iterator[LabSession]:
    """A page of the shared JupyterLab on `notebook_path` (in its own directory), the
    notebook open and every cell run (Run > Run All Cells); `proposed`: cells the run
    adds (an agent's proposed cell), which Run All does not run."""
    artifacts = artifacts_dir()
    started = time.monotonic()
    with ExitStack() as stack:
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        stack.callback(page.close)
        page.set_default_timeout(STEP_TIMEOUT_MS)
        session = LabSession(
            page,
            lab.server,
            lab.lab,
            notebook_path.parent,
            notebook_path,
            cells,
            tools,
            artifacts=artifacts,
            first_request=len(lab.server.requests),
        )
        session.timings["page_up"] = time.monotonic() - started
        page.on("console", lambda m: _record_console(session, m.type, m.text))
        page.on("pageerror", lambda e: session.console.append(f"pageerror: {e}"))
        page.on("request", lambda r: session.requests.append((r.method, r.url)))
        try:
            _open_and_run_all(session, proposed)
        except Exception:
            session.screenshot(f"browser-failure-{notebook_path.stem}.png")
            raise
        yield session
        if session.console:
            print("browser console errors/warnings:\n  " + "\n  ".join(session.console))


def _record_console(session: LabSession, kind: str, text: str) -> None:
    if kind in ("error", "warning"):
        session.console.append(f"{kind}: {text}")


def _wait_for_kernel(s: LabSession, timeout: float) -> None:
    """The server's view: the notebook's kernel with the browser's websocket attached, idle."""
    deadline = time.monotonic() + timeout
    kernels: Any = []
    while time.monotonic() < deadline:
        # Under load the server sometimes answers with an error object (a dict) instead
        # of the list: not ready yet, ask again.
        sessions = httpx.get(s.lab.url("api/sessions"), timeout=5).json()
        if isinstance(sessions, list):
            kernels = [x["kernel"] for x in sessions if x["path"] == s.relative]
            if any(k["connections"] >= 1 and k["execution_state"] == "idle" for k in kernels):
                return
        time.sleep(0.2)  # polling interval
    raise AssertionError(f"no idle, connected kernel in {timeout}s: {kernels}")


def _open_and_run_all(s: LabSession, proposed: int = 0) -> None:
    page, t0 = s.page, time.monotonic()
    # A workspace of its own: the lab's default one would reopen other sessions' notebooks.
    page.goto(s.lab.url(f"lab/workspaces/{s.root.name}/tree/{s.relative}"))
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    s.timings["notebook_open"] = time.monotonic() - t0
    _wait_for_kernel(s, STEP_TIMEOUT_MS / 1000)
    page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
    s.timings["kernel_ready"] = time.monotonic() - t0
    assert not page.locator(".jp-Dialog").count(), "a dialog is in the way: " + (
        page.locator(".jp-Dialog").first.inner_text()
    )

    t1 = time.monotonic()
    page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
    page.wait_for_function(RUN_FINISHED_JS)
    s.timings["run_all_cells"] = time.monotonic() - t1
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
    ran = prompts[: len(prompts) - proposed] if proposed else prompts
    assert all(re.search(r"\[\d+\]", p) for p in ran), (
        f"not every cell ran (prompts {prompts}); the notebook shows:\n{s.notebook_text()}"
    )


@contextmanager
def screenshot_on_failure(s: LabSession, name: str) -> Iterator[None]:
    try:
        yield
    except (KernelStalled, TimelineStale):
        raise  # diagnosed, with its own screenshot
    except BaseException:
        s.screenshot(name)
        raise


def _saved_cells(path: Path) -> list[dict[str, Any]] | None:
    """The notebook's cells as on disk, or None while a save is writing it: jupyter_server's
    atomic_writing copies the old file aside and rewrites this one in place, so a reader
    can find it empty or cut short."""
    try:
        cells: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except json.JSONDecodeError:
        return None
    return cells


class KernelStalled(AssertionError):
    """The `%%agent` cell run below a live timeline froze mid-run (before its first model
    request, or after its answer was streamed whole)."""


class TimelineStale(AssertionError):
    """The session file holds what the timeline still does not show (the tool's result,
    the run's end)."""


def _save(page: Any, relative: str) -> None:
    """File > Save on `page`, as a user saves the notebook at `relative` (as JupyterLab
    names it); done when the server answered the save (its contents API's PUT, after it
    wrote the file), however long a loaded machine takes: no poll of the file against a
    deadline."""
    path = f"/api/contents/{quote(relative)}"
    with page.expect_response(
        lambda r: r.request.method == "PUT" and urlsplit(r.url).path == path
    ) as response:
        page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=re.compile(r"^File$")).click()
        page.locator('.lm-Menu-item[data-command="docmanager:save"]').click()
    assert response.value.ok, f"the save failed: {response.value.status} {response.value.text()}"


def _set_theme(s: Any, theme: str) -> None:
    """Settings > Theme > `theme`, as a user picks it; done when the page says so. `s`:
    anything holding the Playwright page as `.page` (a LabSession, the controls' Page)."""
    page = s.page
    if page.locator(f'body[data-jp-theme-name="{theme}"]').count():
        return
    page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=re.compile(r"^Settings$")).click()
    page.locator('.lm-Menu-item[data-type="submenu"]', has_text=re.compile(r"^Theme$")).hover()
    page.get_by_role("menuitem", name=theme, exact=True).click()
    page.locator(f'body[data-jp-theme-name="{theme}"]').wait_for(state="attached")
    # the theme's stylesheet is in once its variables apply
    page.wait_for_function(
        "dark => getComputedStyle(document.body).getPropertyValue('--jp-layout-color0')"
        ".trim() === (dark ? '#111' : 'white')",
        arg=theme.endswith("Dark"),
    )
