"""Kernel > Restart Kernel and Run All Cells reproduces a notebook in real JupyterLab
(headless Chromium, a real kernel, the loopback model): docs/spec.md §12, with the cell ids
JupyterLab itself sends.

A first Run All asks the model for three `%%agent` cells: one defines names with `python`,
one appends a line to a file with `bash`, one proposes a cell (JupyterLab inserts it below).
After the restart every agent cell replays its run from the session: no model request, the
names exist in the new kernel (a plain cell and the accepted proposal use them), the file
still has one line, the proposal is not inserted again. The replayed cells are saved as
`browser-run-all-replayed.png`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from helpers.lab import (
    RUN_FINISHED_JS,
    STEP_TIMEOUT_MS,
    Lab,
    LabSession,
    _lab,
    screenshot_on_failure,
    write_notebook,
)
from helpers.openai_server import text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until

pytestmark = pytest.mark.xdist_group("browser")

REPLAYED = "↻ replayed from the session: 0 model calls, $0"
PROPOSED = 'print("doubled:", double(answer))'
# The proposal is last: Run All runs the cells it found when clicked, so the inserted cell
# is not run the first time (as `_lab`'s `proposed` expects), and is the second.
CELLS = [
    "%load_ext tiny_agent_nb",
    "%%agent\nDefine the answer and a doubling function.",
    "%%agent\nLog a line to log.txt.",
    'print("names:", answer, double(4))',
    "%%agent\nPropose a cell that doubles the answer.",
]
AGENT_CELLS = [n for n, source in enumerate(CELLS) if source.startswith("%%agent")]
ERROR = '.jp-Notebook [data-mime-type="application/vnd.jupyter.stderr"]'  # and tracebacks


@pytest.fixture(scope="module")
def run_all(lab: Lab, browser: Any) -> Iterator[LabSession]:
    path = write_notebook(lab.directory("run-all") / "analysis.ipynb", CELLS)
    lab.server.enqueue(
        tool_calls_reply(
            tool_call("p1", "python", {"code": "answer = 42\ndef double(x):\n    return 2 * x"})
        ),
        text_reply("Defined answer and double."),
        tool_calls_reply(tool_call("b1", "bash", {"command": "echo logged >> log.txt"})),
        text_reply("Logged."),
        tool_calls_reply(tool_call("c1", "propose_cell", {"code": PROPOSED})),
        text_reply("The cell below doubles the answer."),
    )
    with _lab(lab, path, [], [], browser, proposed=1) as session:
        yield session


def _cells(s: LabSession) -> Any:
    return s.page.locator(".jp-Notebook .jp-CodeCell")


def _sources(s: LabSession) -> list[str]:
    return [str(x) for x in _cells(s).locator(".jp-InputArea-editor .cm-content").all_inner_texts()]


def _output(s: LabSession, n: int) -> str:
    return str(_cells(s).nth(n).locator(".jp-OutputArea").inner_text())


def test_restart_and_run_all_replays_every_agent_cell_from_the_session(
    run_all: LabSession,
) -> None:
    s = run_all
    log = s.root / "log.txt"
    with screenshot_on_failure(s, "browser-run-all-failure.png"):
        # The first Run All asked the model for each cell, and JupyterLab inserted the
        # proposal below its agent cell.
        wait_until(
            lambda: _sources(s).count(PROPOSED) == 1,
            STEP_TIMEOUT_MS / 1000,
            "the proposed cell inserted",
        )
        assert len(s.model_requests()) == 6
        assert log.read_text(encoding="utf-8") == "logged\n"
        assert "names: 42 8" in _output(s, 3)
        assert REPLAYED not in s.notebook_text()
        assert not s.page.locator(ERROR).count(), s.notebook_text()

        s.page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=re.compile("^Kernel$")).click()
        s.page.locator('.lm-Menu-item[data-command="runmenu:restart-and-run-all"]').click()
        s.page.locator(".jp-Dialog .jp-mod-accept").click()
        # Replayed cells say so (only the second Run All can), or a cell shows an error
        # (none did before), then every cell has run.
        s.page.wait_for_function(
            "([said, n, error]) => document.querySelector(error) || document.querySelector("
            "'.jp-Notebook').innerText.split(said).length - 1 === n",
            arg=[REPLAYED, len(AGENT_CELLS), ERROR],
        )
        s.page.wait_for_function(RUN_FINISHED_JS)

        assert len(s.model_requests()) == 6  # nothing was sent
        for n in AGENT_CELLS:
            assert REPLAYED in _output(s, n), _output(s, n)
        assert "— completed; ran again: completed" in _output(s, AGENT_CELLS[0])
        assert "Defined answer and double." in _output(s, AGENT_CELLS[0])
        assert "— completed; not re-run" in _output(s, AGENT_CELLS[1])
        assert log.read_text(encoding="utf-8") == "logged\n"  # bash not run again
        # The names the python call defined exist in the new kernel.
        assert "names: 42 8" in _output(s, 3)
        assert _sources(s).count(PROPOSED) == 1  # not proposed again
        assert "doubled: 84" in _output(s, len(CELLS))  # the accepted proposal, run
        assert not s.page.locator(ERROR).count(), s.notebook_text()
    for n in AGENT_CELLS:
        print(f"--- cell {n}\n{_output(s, n)}")
    s.screenshot("browser-run-all-replayed.png", ".jp-NotebookPanel .jp-WindowedPanel-viewport")
