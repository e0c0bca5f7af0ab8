"""A run's controls clicked in real JupyterLab (headless Chromium, a real kernel): the
approval buttons, Stop and Resume, and what the saved notebook shows of them once the
kernel is gone: the plain record of each answer, never "Error displaying widget".

JupyterLab is left at its defaults, so its clicks reach the kernel on a comm subshell
(its "comms over subshells" setting) once it has made one, and on the main shell before
(tests/test_notebook_stop.py and tests/test_notebook_controls.py click through each route,
the busy main shell included, from a kernel client). A loopback server plays the model.
Screenshots of the buttons in the light and the dark theme, and of the reopened notebook,
go to $TMPDIR/tiny-agent-nb-artifacts/ (or $TINY_AGENT_ARTIFACTS), as test_browser.py's do.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import lab as shared
from helpers.browser_helpers import JupyterLab, artifacts_dir
from helpers.lab import STEP_TIMEOUT_MS, _save, _set_theme
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until

# One JupyterLab at a time on the worker that runs test_browser.py: two would compete
# for the same two cores.
pytestmark = pytest.mark.xdist_group("browser")

WIDGET_ERRORS = ("Error displaying widget", "Failed to load model class", "Model class")

CELLS = [
    "%load_ext tiny_agent_nb",
    "%%agent --approve ask\nRemove the build directory.",
    "%%agent\nWait a minute, then say so.",
    "%%agent --approve ask\nRemove the dist directory.",
    "%%agent\nWait another minute.",
]


@dataclass
class Page:
    page: Any
    lab: JupyterLab
    server: OpenAIServer
    root: Path
    notebook: Path

    @property
    def relative(self) -> str:
        """The notebook's path as JupyterLab names it (relative to the lab's root)."""
        return self.notebook.relative_to(self.lab.root).as_posix()

    def cell(self, n: int) -> Any:
        return self.page.locator(".jp-Notebook .jp-CodeCell").nth(n)

    def run(self, n: int) -> None:
        """Select cell `n` and run it (Shift+Enter in command mode); returns once the
        kernel took it (its prompt shows `[*]` or a count)."""
        prompt = self.cell(n).locator(".jp-InputArea-prompt")
        prompt.click()
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("Shift+Enter")
        prompt.filter(has_text=re.compile(r"\[(\*|\d+)\]")).wait_for(state="attached")

    def outputs(self, n: int) -> Any:
        return self.cell(n).locator(".jp-OutputArea")

    def text(self) -> str:
        return str(self.page.locator(".jp-Notebook").inner_text())

    def screenshot(self, name: str, locator: Any | None = None) -> Path:
        path = artifacts_dir() / name
        (locator or self.page).screenshot(path=str(path))
        print(f"screenshot: {path}")
        return path

    def menu(self, top: str, command: str) -> None:
        bar = self.page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=re.compile(f"^{top}$"))
        bar.click()
        self.page.locator(f'.lm-Menu-item[data-command="{command}"]').click()

    def kernel_ids(self) -> list[str]:
        sessions = httpx.get(self.lab.url("api/sessions"), timeout=5).json()
        return [x["kernel"]["id"] for x in sessions if x["path"] == self.relative]

    def idle(self) -> None:
        self.page.wait_for_function(
            "() => document.querySelector('.jp-Notebook-ExecutionIndicator')"
            "?.dataset.status === 'idle'"
        )


@dataclass
class Lab:
    lab: JupyterLab
    server: OpenAIServer
    browser: Any

    def open(self, name: str, cells: list[str]) -> Page:
        """A new notebook `name`/`name`.ipynb in a directory of its own, open in a new
        page (and a workspace of its own), its kernel started and idle."""
        root = self.lab.root / name
        root.mkdir()
        notebook = root / f"{name}.ipynb"
        notebook.write_text(json.dumps(_notebook(cells), indent=1), encoding="utf-8")
        tab = self.browser.new_page(viewport={"width": 1200, "height": 1400})
        tab.set_default_timeout(STEP_TIMEOUT_MS)
        tab.goto(self.lab.url(f"lab/workspaces/{name}/tree/{name}/{name}.ipynb"))
        tab.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
        tab.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
        _wait_for_kernel(self.lab, notebook.relative_to(self.lab.root).as_posix())
        return Page(tab, self.lab, self.server, root, notebook)


@pytest.fixture(scope="module")
def lab(lab: shared.Lab, browser: Any) -> Iterator[Lab]:
    """The test process's JupyterLab, model server and Chromium (tests/conftest.py), which
    the other browser modules use too; this module's notebooks are in directories of
    their own."""
    # A held answer waits longer than a step may: a Stop press not taken while the answer
    # is held fails the step, not the hold.
    kept, lab.server.hold_timeout = lab.server.hold_timeout, 2 * STEP_TIMEOUT_MS / 1000
    try:
        yield Lab(lab.lab, lab.server, browser)
    finally:
        lab.server.hold_timeout = kept


@pytest.fixture(scope="module")
def lab_page(lab: Lab) -> Iterator[Page]:
    p = lab.open("controls", CELLS)
    (p.root / "build").mkdir()
    (p.root / "dist").mkdir()
    yield p
    p.page.close()


@contextmanager
def shown_on_failure(p: Page, name: str) -> Iterator[None]:
    """A screenshot and the notebook's text when what follows fails."""
    try:
        yield
    except BaseException:
        p.screenshot(f"controls-failure-{name}.png")
        print(p.text())
        raise


def _wait_for_kernel(lab: JupyterLab, relative: str) -> None:
    """The server's view: the notebook's kernel with the browser's websocket attached."""

    def connected() -> bool:
        sessions = httpx.get(lab.url("api/sessions"), timeout=5).json()
        return isinstance(sessions, list) and any(
            x["path"] == relative
            and x["kernel"]["connections"] >= 1
            and x["kernel"]["execution_state"] == "idle"
            for x in sessions
        )

    wait_until(connected, STEP_TIMEOUT_MS / 1000, "the notebook's kernel, idle", interval=0.2)


def _notebook(cells: list[str]) -> dict[str, Any]:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"cell-{n}",
                "metadata": {},
                "outputs": [],
                "source": source,
            }
            for n, source in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _stop_while_the_answer_is_held(p: Page, n: int, marker: str) -> None:
    """Run cell `n`, whose answer (a bash call that touches `marker`) the server holds;
    click Stop as soon as it shows, wait for the run to stop while the answer is still
    held, then let the answer go: the Resume button shows and the call never ran."""
    answer = threading.Event()
    sent = len(p.server.requests)
    command = f"touch {marker}; sleep 60"
    p.server.enqueue(
        tool_calls_reply(tool_call(f"c{n}", "bash", {"command": command}), hold=answer)
    )
    p.run(n)
    stop = _button(p, n, "Stop")
    p.server.wait_for_requests(sent + 1, timeout=STEP_TIMEOUT_MS / 1000)
    stop.click()
    p.outputs(n).get_by_text("■ Stopped with the Stop button.").wait_for(state="visible")
    answer.set()
    _button(p, n, "Resume")
    p.idle()
    assert not (p.root / marker).exists()  # the answer's call never ran


def _button(p: Page, n: int, label: str) -> Any:
    button = p.outputs(n).locator(".tan-control button", has_text=re.compile(f"^{label}$"))
    button.wait_for(state="visible")
    return button


def test_approval_stop_and_resume_are_buttons_and_leave_plain_records(lab_page: Page) -> None:
    p = lab_page
    with shown_on_failure(p, "approval"):
        _check_approval_stop_and_resume(p)


def _check_approval_stop_and_resume(p: Page) -> None:
    p.run(0)
    p.idle()

    # Approval: the whole call, escaped, with three buttons; Allow runs it.
    p.server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": "rm -rf build && echo '<gone>'"})),
        text_reply("The build directory is gone."),
    )
    p.run(1)
    allow = _button(p, 1, "Allow")
    question = p.outputs(1).locator(".tan-control pre")
    assert "rm -rf build && echo '<gone>'" in question.inner_text()
    assert question.locator("gone").count() == 0  # the call is text, not markup
    assert _button(p, 1, "Allow bash for the rest of this session").is_visible()
    assert _button(p, 1, "Deny").is_visible()
    assert (p.root / "build").exists()
    p.screenshot("controls-approval-light.png", p.outputs(1))
    allow.click()
    record = p.outputs(1).locator(".tan-control-record", has_text="allowed by you")
    record.wait_for(state="visible")
    p.outputs(1).get_by_text("The build directory is gone.").wait_for(state="visible")
    assert not (p.root / "build").exists()
    assert p.outputs(1).locator(".tan-control").count() == 0  # no button left

    # Stop while a command runs (the kernel's main thread is busy in it), then Resume.
    p.server.enqueue(
        tool_calls_reply(tool_call("c2", "bash", {"command": "touch started; sleep 60"})),
        text_reply("Waited, after the resume."),
    )
    p.run(2)
    stop = _button(p, 2, "Stop")
    wait_until((p.root / "started").exists, STEP_TIMEOUT_MS / 1000, "the command to start")
    stop.click()
    p.outputs(2).get_by_text("■ Stopped with the Stop button.").wait_for(state="visible")
    resume = _button(p, 2, "Resume")
    p.screenshot("controls-resume-light.png", p.outputs(2))
    resume.click()
    p.outputs(2).get_by_text("Waited, after the resume.").wait_for(state="visible")
    p.outputs(2).get_by_text("resumed by you").wait_for(state="visible")
    p.idle()

    # The approval buttons in the dark theme; Deny leaves the directory.
    p.server.enqueue(
        tool_calls_reply(tool_call("c3", "bash", {"command": "rm -rf dist"})),
        text_reply("Left as it is."),
    )
    p.run(3)
    deny = _button(p, 3, "Deny")
    _set_theme(p, "JupyterLab Dark")
    try:
        p.screenshot("controls-approval-dark.png", p.outputs(3))
    finally:
        _set_theme(p, "JupyterLab Light")
    deny.click()
    p.outputs(3).locator(".tan-control-record", has_text="denied by you").wait_for(state="visible")
    assert (p.root / "dist").exists()

    # Stop while the model is thinking (its answer held by the server), clicked as soon as
    # it shows (JupyterLab may not have its comm subshell yet: the click then goes to the
    # busy main shell): the run stops while the answer is still held, and the answer let
    # go after it runs nothing. This run, stopped last, leaves its Resume button live
    # when the notebook is saved.
    _stop_while_the_answer_is_held(p, 4, "waiting")
    text = p.text()
    for problem in WIDGET_ERRORS:
        assert problem not in text


def test_the_reopened_notebook_shows_the_records_and_no_dead_widget(lab_page: Page) -> None:
    """Saved, its kernel shut down, reopened: each control reads as its record; the
    Resume button that was live when saved shows what to type instead."""
    p = lab_page
    with shown_on_failure(p, "reopened"):
        _check_reopened(p)


def _check_reopened(p: Page) -> None:
    _save(p.page, p.relative)
    saved = _saved(p.notebook)
    assert len(saved) == 5, saved  # every cell run, each with its outputs
    views = [o for c in saved for o in c if "application/vnd.jupyter.widget-view+json" in o]
    assert len(views) == 1  # the live Resume button of the last cell, nothing else
    for kernel in p.kernel_ids():
        httpx.delete(p.lab.url(f"api/kernels/{kernel}"), timeout=30)
    p.page.reload()
    p.page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    p.outputs(4).locator(".tan-control-record").first.wait_for(state="visible")
    p.page.wait_for_function(
        "() => [...document.querySelectorAll('.jupyter-widgets')].every("
        "w => !w.textContent.includes('Loading widget'))"
    )
    text = p.text()
    for problem in WIDGET_ERRORS:
        assert problem not in text, f"{problem!r} is shown in the reopened notebook:\n{text}"
    assert "allowed by you" in text and "denied by you" in text and "resumed by you" in text
    assert "%agent resume continues this run" in text
    p.screenshot("controls-reopened-light.png", p.page.locator(".jp-NotebookPanel"))
    _set_theme(p, "JupyterLab Dark")
    try:
        p.screenshot("controls-reopened-dark.png", p.page.locator(".jp-NotebookPanel"))
    finally:
        _set_theme(p, "JupyterLab Light")


def _saved(path: Path) -> list[list[dict[str, Any]]]:
    """The outputs' data of the code cells that have outputs, as saved (running the last
    cell added an empty one below it)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return [
        [o.get("data", {}) for o in c.get("outputs", [])]
        for c in notebook["cells"]
        if c["cell_type"] == "code" and c.get("outputs")
    ]


DYING = [
    "%load_ext tiny_agent_nb",
    "%agent timeline",
    "%%agent\nRun the command.",
    "%load_ext tiny_agent_nb",
]


def test_a_kernel_that_dies_during_a_run_leaves_no_dead_widget_and_a_superseded_timeline(
    lab: Lab,
) -> None:
    """The kernel dies inside a bash call (`kill -9 $TINY_AGENT_KERNEL_PID`), JupyterLab
    restarts it: the Stop button it showed reads as its record, and once the new kernel
    has settled the run, the timeline it left showing the run open says it is superseded."""
    p = lab.open("dying", DYING)
    with shown_on_failure(p, "dying"):
        lab.server.enqueue(
            tool_calls_reply(tool_call("c1", "bash", {"command": "kill -9 $TINY_AGENT_KERNEL_PID"}))
        )
        p.run(0)
        p.idle()
        p.run(1)
        p.idle()
        # The record the notebook keeps: shown once the timeline's widget died with its kernel.
        timeline = p.outputs(1).locator(".tan-control-record .tan-timeline")
        p.run(2)
        dialog = p.page.locator(".jp-Dialog", has_text="appears to have died")
        dialog.wait_for(state="visible")
        dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
        _wait_for_kernel(lab.lab, p.notebook.relative_to(lab.lab.root).as_posix())
        assert timeline.locator('.tan-run[data-status="open"]').count() == 1  # as it was left
        superseded = timeline.locator(".tan-superseded")
        assert not superseded.is_visible()
        p.outputs(2).get_by_text("a Stop button was here while the run ran").wait_for(
            state="visible"
        )

        p.run(3)
        p.outputs(3).get_by_text("The previous kernel stopped during a run").wait_for(
            state="visible"
        )
        superseded.wait_for(state="visible")
        text = p.text()
        for problem in WIDGET_ERRORS:
            assert problem not in text
        p.screenshot("controls-dead-kernel.png", p.page.locator(".jp-NotebookPanel"))
    p.page.close()


ASKING = [
    "%load_ext tiny_agent_nb\nimport os; open('kernel.pid', 'w').write(str(os.getpid()))",
    "%%agent --approve ask\nRemove the build directory.",
]


def test_a_question_whose_kernel_died_reads_as_its_record(lab: Lab) -> None:
    """The kernel dies while an approval question waits: its buttons (an anywidget, shown
    in an ipywidgets box, which JupyterLab marks disconnected) give way to the record."""
    p = lab.open("asking", ASKING)
    with shown_on_failure(p, "asking"):
        p.run(0)
        p.idle()
        lab.server.enqueue(tool_calls_reply(tool_call("c1", "bash", {"command": "rm -rf x"})))
        p.run(1)
        _button(p, 1, "Allow")
        record = p.outputs(1).locator(".tan-control-record", has_text="not answered here")
        assert not record.is_visible()  # the live question hides it
        os.kill(int((p.root / "kernel.pid").read_text()), signal.SIGKILL)
        record.wait_for(state="visible")
        assert p.outputs(1).locator(".tan-control button").filter(visible=True).count() == 0
    p.page.close()


def test_shutting_the_kernel_down_leaves_a_saved_notebook_saved(lab: Lab) -> None:
    """Saved, then Kernel > Shut Down Kernel, then closed: nothing the kernel did on its
    way out changed an output, so closing does not ask to save."""
    p = lab.open("closing", ["%load_ext tiny_agent_nb", "%agent timeline"])
    with shown_on_failure(p, "closing"):
        p.run(0)
        p.idle()
        p.run(1)
        p.idle()
        p.outputs(1).locator(".tan-control .tan-timeline").wait_for(state="visible")  # live
        tab = p.page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="closing.ipynb")
        _save(p.page, p.relative)
        p.page.locator(
            ".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-dirty", has_text="closing.ipynb"
        ).wait_for(state="detached")
        p.menu("Kernel", "kernelmenu:shutdown")
        wait_until(
            lambda: p.kernel_ids() == [],
            STEP_TIMEOUT_MS / 1000,
            "the kernel shut down",
            interval=0.2,
        )
        # The page says "No Kernel" once the kernel's connection is gone: whatever the
        # kernel sent on its way out came before, on the same connection.
        p.page.locator(".jp-Toolbar-kernelName", has_text="No Kernel").wait_for(state="visible")
        assert "jp-mod-dirty" not in (tab.get_attribute("class") or "")
        p.menu("File", "application:close")
        tab.wait_for(state="detached")
        assert p.page.locator(".jp-Dialog", has_text="Save").count() == 0
    p.page.close()
