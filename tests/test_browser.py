"""The notebook surface in a real browser: JupyterLab + headless Chromium + a real kernel.

A loopback OpenAI-compatible server plays the model (a tool call, then an answer, for
every `%%agent` cell). JupyterLab serves a temporary copy of notebooks/quickstart.ipynb
(or, until that exists, an equivalent notebook written here), its kernels pointed at the
loopback server through TINY_AGENT_BASE_URL / TINY_AGENT_MODEL. Chromium runs every cell
through the Run menu, then the tests read what a user would see: the timeline (rich HTML
updated in place, live), with its run, attempt and tool statuses, the same timeline after
saving and reopening the notebook with its kernel shut down (no "model not found"),
its colors' contrast in the light and the dark theme, and a tool cut short by a kernel's
death. What the agent hands back (a hostile answer, a proposed cell) is
tests/test_browser_answers.py; the lab and the page, tests/helpers/lab.py. Screenshots go to
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
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers.browser_helpers import (
    REPO,
)
from helpers.openai_server import (
    MODEL,
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
from helpers.lab import (
    STEP_TIMEOUT_MS,
    TIMELINE,
    WIDGET_CONSOLE_ERROR,
    WIDGET_ERRORS,
    KernelStalled,
    Lab,
    LabSession,
    TimelineStale,
    _code_cell,
    _lab,
    _save,
    _saved_cells,
    _set_theme,
    screenshot_on_failure,
)

# The tests share one JupyterLab server, one model server and Chromium with the other
# browser modules (tests/conftest.py: starting each is seconds of CPU), each session its
# own notebook in its own directory, its own page and kernel; they run in order (a later
# test reopens what an earlier one saved): one worker runs them all in a parallel run.
pytestmark = pytest.mark.xdist_group("browser")

QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"


# ---------------------------------------------------------------- the notebook


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


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
        assert re.search(rf"total\s+{24 * k}\s+{10 * k}\s", s.notebook_text())

    # the session file sits beside the notebook (JPY_SESSION_NAME), one request per step
    assert (s.root / f"{s.notebook.stem}.agent.jsonl").exists()
    assert [r.status for r in s.model_requests()] == [200] * (2 * k)

    view.scroll_into_view_if_needed()
    s.screenshot("browser-timeline.png")
    s.screenshot("browser-timeline-output.png", TIMELINE)


def _notebook_cells(path: Path) -> list[str]:
    cells = wait_until(lambda: _saved_cells(path), what=f"{path.name} written whole")
    return [_source(c) for c in cells]


def _source_is(source: str, line: str) -> bool:
    return source.strip() == line


# How long the new cell may take to send its first request before the test looks for
# the deadlock KernelStalled names: a bound against it, not a measure (a few seconds on
# a loaded machine).
STALLED_S = 60.0


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
    # The answer's output may render a moment after the timeline says completed (two
    # outputs, updated apart): wait for it, as a reader would.
    page.locator(".jp-Notebook", has_text="Scripted live answer.").wait_for(state="visible")
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
        _save(s.page, s.relative)
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
