"""A cell change in a real kernel, answered as a Jupyter frontend answers it: the diff is
the run's approval question (asked under `--approve auto` too), Accept applies exactly
the change shown, Reject and Stop change nothing, a message to a question that is not the
diff's does nothing, the saved notebook keeps each diff and its decision as text, and a
cell run without stdin falls back to a proposed cell. The notebook is held in the kernel
(tests/helpers/fake_notebook.py), in place of the bridge's (the real one is
test_browser_notebook_bridge.py's)."""

from __future__ import annotations

from pathlib import Path

from test_notebook_controls import records, results

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.widget_frontend import WIDGET_VIEW, Cell, WidgetFrontend

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

HELPERS = Path(__file__).parent
# The notebook's cells: c0 the agent cell, c1 the user's code (with a character the
# diff shows escaped), c2 another agent cell.
NOTEBOOK = (
    f"import sys; sys.path.insert(0, {str(HELPERS)!r})\n"
    "from helpers.fake_notebook import FakeNotebook\n"
    "nb = FakeNotebook('%%agent', 'total = price * qty\\u200b', '%%agent\\nold', own='c0')\n"
    "get_ipython().magics_manager.registry['AgentMagics'].runtime.loops.notebook = nb"
)


def frontend(start_kernel: StartKernel) -> WidgetFrontend:
    ui = WidgetFrontend(start_kernel(shared="widgets"))
    assert "session" in ui.finish(ui.send("%load_ext tiny_agent_nb")).stdout
    ui.finish(ui.send(NOTEBOOK))
    return ui


def sources(ui: WidgetFrontend) -> str:
    cell = ui.finish(ui.send("print([c.source for c in nb.cells])"))
    return cell.stdout.strip()


def no_widget_kept(cell: Cell) -> None:
    assert [d for d in cell.outputs() if WIDGET_VIEW in d] == []


def test_accept_applies_the_diff_shown_and_the_notebook_keeps_it_as_text(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    ui = frontend(start_kernel)
    server.enqueue(
        tool_calls_reply(tool_call("e1", "edit_cell", {"cell_id": "c1", "source": "total = 2"})),
        text_reply("Done."),
    )
    cell = ui.send("%%agent\nFix the total.")  # the kernel's approval is auto
    accept = ui.wait_for_button("Accept")
    diff = ui.questions()[-1].state["text"]
    assert diff == "cell 2 of 3 (id c1)\n@@ -1 +1 @@\n-total = price * qty\\u200b\n+total = 2"
    ui.click(accept)
    ui.finish(cell)

    assert sources(ui) == "['%%agent', 'total = 2', '%%agent\\nold']"
    assert results(workspace) == [
        (
            "completed",
            "The user accepted the change. Cell c1 now holds the new source (it has not run).",
        ),
    ]
    no_widget_kept(cell)
    kept = [
        d["text/html"] for d in cell.outputs() if "tan-control-record" in d.get("text/html", "")
    ]
    assert any(
        "✓ <b>edit_cell</b> — accepted by you<pre>cell 2 of 3 (id c1)\n@@ -1 +1 @@\n"
        "-total = price * qty\\u200b\n+total = 2</pre>" in html
        for html in kept
    ), kept


def test_reject_by_key_changes_nothing_and_a_message_to_another_question_does_nothing(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """A click carries only a choice: fields of a forged message (another cell, other
    source) are not read, and a question answered (closed) answers nothing more."""
    ui = frontend(start_kernel)
    server.enqueue(
        tool_calls_reply(tool_call("e1", "edit_cell", {"cell_id": "c1", "source": "total = 2"})),
        tool_calls_reply(tool_call("d1", "insert_cell", {"after_cell_id": "c1", "source": "x"})),
        text_reply("Done."),
    )
    cell = ui.send("%%agent\nFix the total.")
    ui.wait_for_button("Accept")
    first = ui.questions()[-1]
    ui._custom(first, {"choice": "always"})  # no such button on a diff: nothing
    ui.press_key(first, "d")  # Deny's key on other questions: nothing here
    ui.press_key(first, "r")  # Reject: the first answer
    ui.until(lambda: len(ui.questions()) == 2 and ui.buttons("Accept"), "the second diff")
    second = ui.questions()[-1]
    assert second.state["text"].startswith("new code cell after cell 2 of 3 (id c1)\n")
    ui._custom(first, {"choice": "allow"})  # Accept, to the first diff's (closed) question
    ui._custom(second, {"choice": "deny", "cell_id": "c2", "source": "import os"})
    ui.finish(cell)

    assert sources(ui) == "['%%agent', 'total = price * qty\\u200b', '%%agent\\nold']"
    assert [outcome for outcome, _ in results(workspace)] == ["denied", "denied"]
    assert "The user rejected this change; cell c1 is unchanged." in results(workspace)[0][1]
    assert "⊘ edit_cell — rejected by you" in cell.text()


def test_a_run_stopped_while_a_diff_waits_leaves_it_visibly_void(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    ui = frontend(start_kernel)
    server.enqueue(tool_calls_reply(tool_call("d1", "delete_cell", {"cell_id": "c1"})))
    cell = ui.send("%%agent\nDelete it.")
    ui.wait_for_button("Accept")
    ui.click(ui.wait_for_button("Stop the run"))
    ui.finish(cell)

    assert sources(ui) == "['%%agent', 'total = price * qty\\u200b', '%%agent\\nold']"
    assert [outcome for outcome, _ in results(workspace)] == ["interrupted"]
    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]
    assert "■ delete_cell — not answered: the run was stopped" in cell.text()
    assert ui.shown_buttons(cell) == ["Resume"]


def test_a_cell_run_without_stdin_proposes_the_new_source_and_tells_the_model(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """nbclient runs cells with stdin off: no one can accept a diff, so the edit becomes
    the proposed cell below (the execute reply's set_next_input)."""
    kernel = start_kernel(shared=True)
    kernel.execute("%load_ext tiny_agent_nb")
    kernel.execute(NOTEBOOK)
    server.enqueue(
        tool_calls_reply(tool_call("e1", "edit_cell", {"cell_id": "c1", "source": "total = 2"})),
        text_reply("Proposed."),
    )
    run = kernel.execute("%%agent\nFix the total.")
    assert not [d for d in run.displays if WIDGET_VIEW in d]
    ((outcome, told),) = results(workspace)
    assert outcome == "completed"
    assert told.startswith(
        "Cell c1 was not changed: no one can be asked to accept a diff here. The new source "
        "was proposed as a new cell "
    )
    assert run.reply is not None
    proposed = [p["text"] for p in run.reply["payload"] if p.get("source") == "set_next_input"]
    assert proposed == ["total = 2"]


def test_a_rewind_puts_the_cell_back_through_the_kernel_s_notebook(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """`%agent rewind 1` plans the cell's restore from the notebook the tools see, and
    `--yes` applies it there, unless the user changed the cell since."""
    ui = frontend(start_kernel)
    server.enqueue(
        tool_calls_reply(tool_call("e1", "edit_cell", {"cell_id": "c1", "source": "total = 2"})),
        text_reply("Done."),
    )
    cell = ui.send("%%agent\nFix the total.")
    ui.click(ui.wait_for_button("Accept"))
    ui.finish(cell)
    plan = ui.finish(ui.send("%agent rewind 1")).stdout
    assert "cells to restore (1):\n    cell 2 of 3: put back its source before" in plan
    assert sources(ui) == "['%%agent', 'total = 2', '%%agent\\nold']"
    done = ui.finish(ui.send("%agent rewind 1 --yes")).stdout
    assert "cell 2 of 3 (id c1): restored" in done
    assert sources(ui) == "['%%agent', 'total = price * qty\\u200b', '%%agent\\nold']"
