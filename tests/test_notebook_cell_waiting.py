"""While the model has sent nothing of its answer, the `%%agent` cell says it waits and
counts the seconds, in one display; the answer's first text takes that display over,
and whatever else ends the wait (a call, a line of the cell's own, an error, a stop)
empties it. A slow local model once showed a Stop button alone for 50 s.

The count is drawn on the kernel's main thread, when the provider tells of a silence
(`Waiting`): in a real kernel the count shows and goes on while the server holds the
answer, the answer replaces it, and no count is left in what the notebook keeps, however
the run ends and however close a count comes to its answer."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from test_notebook_cell_stream import Shown
from test_notebook_controls import frontend, records

from tiny_agent_nb.notebook._display import WAITING_WORDS, CellDisplay
from tiny_agent_nb.provider import ReasoningDelta, TextDelta, ToolCallStarted, Waiting
from tiny_agent_nb.session import ToolCall

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply
from helpers.widget_frontend import Cell

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

COUNT = re.compile(re.escape(WAITING_WORDS) + r" (\d+)s")


def test_the_wait_is_counted_in_one_display_that_the_answer_takes_over() -> None:
    shown = Shown()
    cell = CellDisplay(rich=True, publish=shown)
    cell.on_stream(Waiting(1.02))
    cell.on_stream(Waiting(2.5))
    (counted,) = shown.texts
    cell.on_stream(TextDelta("Here"))
    cell.on_stream(Waiting(3.7))  # a pause inside the answer is the answer's
    cell.finish("Here it is.")
    assert shown.texts == {counted: "Here it is."}
    assert shown.calls[:3] == [
        (counted, False, f"{WAITING_WORDS} 1s"),
        (counted, True, f"{WAITING_WORDS} 2s"),
        (counted, True, "Here"),
    ]


@pytest.mark.parametrize("begun", ["a call", "reasoning"])
def test_an_answer_without_text_empties_the_count_and_the_next_request_counts_anew(
    begun: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = Shown()
    cell = CellDisplay(rich=True, publish=shown)
    cell.on_stream(Waiting(1.0))
    started = ToolCallStarted(0, "c1", "list_files")
    cell.on_stream(started if begun == "a call" else ReasoningDelta("Hmm."))
    cell.on_stream(Waiting(2.0))  # its arguments come slowly: still the answer
    assert list(shown.texts.values()) == [""]
    cell.on_tool_start(ToolCall(id="c1", name="list_files", arguments={}), {})
    cell.on_stream(Waiting(1.0))  # the next request
    first, second = shown.texts
    assert shown.texts == {first: "", second: f"{WAITING_WORDS} 1s"}
    cell.finish(None)  # an error, Ctrl-C, the Stop button: the run ends without text
    assert shown.texts == {first: "", second: ""}
    assert WAITING_WORDS not in capsys.readouterr().out


def test_a_retry_line_comes_after_the_count_it_ends() -> None:
    shown = Shown()
    cell = CellDisplay(rich=True, publish=shown)
    cell.on_stream(Waiting(1.0))
    cell.on_notice("the server is slow")
    cell.finish("Done.")
    first, answer = shown.texts
    assert shown.texts == {first: "", answer: "Done."}


def test_a_terminal_is_not_given_a_line_each_second(capsys: pytest.CaptureFixture[str]) -> None:
    def never(bundle: dict[str, str], *, display_id: str, update: bool) -> None:
        raise AssertionError(bundle)

    cell = CellDisplay(rich=False, publish=never)
    cell.on_stream(Waiting(1.0))
    cell.on_stream(Waiting(2.0))
    cell.on_stream(TextDelta("Done."))
    cell.finish("Done.")
    assert capsys.readouterr().out == "Done.\n"


# ---------------------------------------------------------------- in a real kernel


def count_in(cell: Cell) -> int | None:
    found = COUNT.search(cell.text())
    return int(found.group(1)) if found else None


@pytest.mark.parametrize("ending", ["answered", "interrupted"])
def test_a_kernel_cell_counts_while_the_answer_is_held_and_keeps_no_count(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path, ending: str
) -> None:
    ui = frontend(start_kernel, "main shell")
    answer = threading.Event()
    server.enqueue(text_reply("Thought it over.", hold=answer))
    cell = ui.send("%%agent\nTake your time.")
    first = ui.until(lambda: count_in(cell), "the count in the cell")
    ui.until(lambda: (count_in(cell) or 0) > first, "the count to go on")
    (where,) = [i for i, d in enumerate(cell.outputs()) if WAITING_WORDS in d.get("text/plain", "")]
    if ending == "answered":
        answer.set()
    else:
        ui.kernel.interrupt()
    ui.finish(cell)

    assert WAITING_WORDS not in cell.text()
    if ending == "answered":
        assert cell.outputs()[where]["text/plain"] == "Thought it over."  # in its place
    else:
        assert cell.outputs()[where]["text/plain"] == ""
        assert "■ Interrupted" in cell.stdout
        assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]


def test_many_quick_answers_each_take_over_their_count_and_no_count_comes_after(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """A silence of a millisecond is told here, so counts and answers come close: for
    every display, once it shows an answer (or nothing), no count comes after."""
    ui = frontend(start_kernel, "main shell", shared=False)  # it changes WAIT_EVERY in it
    ui.finish(ui.send("import tiny_agent_nb.provider._deadline as d\nd.WAIT_EVERY = 0.001"))
    drawn: list[tuple[str, str]] = []  # (display id, text) as the frontend gets them
    absorb = ui._absorb

    def recording(msg: dict[str, Any]) -> None:
        content = msg["content"]
        if msg["header"]["msg_type"] in ("display_data", "update_display_data"):
            display_id = (content.get("transient") or {}).get("display_id")
            drawn.append((display_id, content["data"].get("text/plain", "")))
        absorb(msg)

    ui._absorb = recording  # type: ignore[method-assign]
    first = threading.Event()  # held until it has counted: at least one count for sure
    server.enqueue(text_reply("Answer 0.", hold=first))
    server.enqueue(*(text_reply(f"Answer {n}.") for n in range(1, 20)))
    cells = [ui.send(f"%%agent\nQuestion {n}.") for n in range(20)]
    ui.until(lambda: count_in(cells[0]) is not None, "the first cell's count")
    first.set()
    for cell in cells:
        ui.finish(cell)

    for n, cell in enumerate(cells):
        assert f"Answer {n}." in cell.text() and WAITING_WORDS not in cell.text()
    counted = {i for i, text in drawn if text.startswith(WAITING_WORDS)}
    assert counted  # the first answer's, at least
    for display_id in counted:
        texts = [text for i, text in drawn if i == display_id]
        ended = next(k for k, text in enumerate(texts) if not text.startswith(WAITING_WORDS))
        assert all(not t.startswith(WAITING_WORDS) for t in texts[ended:]), texts
