"""A run's controls in a real kernel, answered as a Jupyter frontend answers them: the
approval buttons, Stop and Resume are ipywidgets, and a click is a `comm_msg` the
kernel handles while the cell still runs, sent to the main shell or on a comm subshell
(JupyterLab 4.4+): on the subshell the kernel keeps for the controls (ipykernel 7.4+),
or, where it has none, by the run's pump on the main shell.

What the notebook keeps is checked as a saved notebook holds it (tests/helpers/widget_frontend.py
replaces a display when an update names it): a plain record of the answer, never a
widget view, whose model dies with the kernel ("Error displaying widget: model not
found" after reopening).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import ipykernel
import pytest

from tiny_agent_nb.agent import resumable_operation
from tiny_agent_nb.notebook._controls import STYLE, Record
from tiny_agent_nb.notebook._display import WAITING_WORDS
from tiny_agent_nb.session import load_session

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply, usage
from helpers.widget_frontend import WIDGET_VIEW, Cell, WidgetFrontend

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

SESSION = "analysis.agent.jsonl"
# "main shell, read by the pump": the kernel as ipykernel 6 and 7.0-7.3 are, where a comm
# cannot choose the shell that handles its messages, so the controls have no subshell of
# their own and the run's pump reads the clicks the frontend sends to the main shell.
PUMP = "main shell, read by the pump"
ROUTES = ["main shell", "comm subshell", PUMP]
NO_COMM_ROUTING = (
    "import ipykernel.comm.comm as c\n"
    "if '_reply_subshell_for' in vars(c.BaseComm): del c.BaseComm._reply_subshell_for"
)


def frontend(
    start_kernel: StartKernel, route: str, *, shared: bool = True, **env_options: object
) -> WidgetFrontend:
    """A frontend on a kernel of this test process's pool (`shared`; a pump-only kernel
    is shared only with other pump-only tests), or on a new one."""
    if route == "comm subshell" and int(ipykernel.__version__.split(".")[0]) < 7:
        pytest.skip("comm subshells came with ipykernel 7")
    tag = (PUMP if route == PUMP else "widgets") if shared else False
    kernel = start_kernel(shared=tag, **env_options)
    ui = WidgetFrontend(kernel)
    if route == "comm subshell":
        ui.use_comm_subshell()
    if route == PUMP:
        ui.finish(ui.send(NO_COMM_ROUTING))
    loaded = ui.finish(ui.send("%load_ext tiny_agent_nb"))
    assert "session" in loaded.stdout, loaded.stdout
    return ui


def facts(workspace: Path) -> list[dict[str, Any]]:
    found = []
    for line in (workspace / SESSION).read_text(encoding="utf-8").splitlines()[1:]:
        value = json.loads(line)
        found.extend(value if isinstance(value, list) else [value])
    return found


def records(workspace: Path, kind: str) -> list[dict[str, Any]]:
    return [
        f["record"]
        for f in facts(workspace)
        if f["kind"] == "record" and f["record"]["type"] == kind
    ]


def results(workspace: Path) -> list[tuple[str, str]]:
    """(outcome, content) of every tool result, in file order."""
    return [
        (f["entry"]["outcome"], f["entry"]["message"]["content"])
        for f in facts(workspace)
        if f["kind"] == "entry" and f["entry"]["message"].get("role") == "tool"
    ]


def no_widget_kept(cell: Cell) -> None:
    kept = [d for d in cell.outputs() if WIDGET_VIEW in d]
    assert kept == [], f"widget views left in the saved outputs: {kept}"


@pytest.mark.parametrize("route", ROUTES)
def test_a_click_on_allow_runs_the_call_and_the_notebook_keeps_what_was_answered(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path, route: str
) -> None:
    ui = frontend(start_kernel, route)
    command = "echo approved > approved.txt"
    server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": command})),
        text_reply("Done."),
    )
    cell = ui.send("%%agent --approve ask\nWrite the file.")
    allow = ui.wait_for_button("Allow")
    # The whole call is shown before the click, as text, and nothing ran yet.
    question = ui.questions()[-1].state["text"]
    assert "bash wants to run with:" in question
    assert command in question
    assert not (workspace / "approved.txt").exists()
    ui.click(allow)
    ui.finish(cell)

    assert (workspace / "approved.txt").read_text() == "approved\n"
    assert results(workspace)[0][0] == "completed"
    no_widget_kept(cell)
    assert ui.shown_widgets(cell) == []
    # every model the controls opened (buttons, boxes, their layouts and styles) is closed
    assert [m.state.get("_model_name") for m in ui.models.values() if m.open] == []
    text = cell.text()
    assert f'✓ bash command="{command}", timeout=120.0 — allowed by you' in text
    assert "Done." in text


@pytest.mark.parametrize("route", ROUTES)
def test_a_click_on_deny_records_the_call_denied_and_it_never_runs(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path, route: str
) -> None:
    ui = frontend(start_kernel, route)
    server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": "touch denied.txt"})),
        text_reply("Understood."),
    )
    cell = ui.send("%%agent --approve ask\nTouch the file.")
    ui.click(ui.wait_for_button("Deny"))
    ui.finish(cell)

    assert not (workspace / "denied.txt").exists()
    assert results(workspace)[0][0] == "denied"
    no_widget_kept(cell)
    assert '⊘ bash command="touch denied.txt", timeout=120.0 — denied by you' in cell.text()


def test_a_character_no_one_sees_is_shown_escaped_in_the_question_and_refused_in_a_cell(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """`dry_run\\u034f` is another name than `dry_run` that reads the same: the question
    shows the difference, and a proposed cell holding it is not put in the notebook."""
    ui = frontend(start_kernel, "main shell")
    code = "dry_run\u034f = True"  # COMBINING GRAPHEME JOINER: printable, and invisible
    server.enqueue(
        tool_calls_reply(tool_call("c1", "python", {"code": code})),
        tool_calls_reply(tool_call("c2", "propose_cell", {"code": code})),
        text_reply("Done."),
    )
    cell = ui.send("%%agent --approve ask\nTurn the dry run off.")
    deny = ui.wait_for_button("Deny")
    question = ui.questions()[-1].state["text"]
    assert "  code: dry_run\\u034f = True" in question
    assert "\u034f" not in question  # the character itself never reaches the screen
    ui.click(deny)
    ui.finish(cell)

    assert 'python code="dry_run\\u034f = True" — denied by you' in cell.text()
    (denied, _), (failed, refused) = results(workspace)
    assert (denied, failed) == ("denied", "error")
    assert refused.startswith("the cell holds characters a reader cannot see as themselves")
    assert "(U+034F at line 1)" in refused
    reply = cell.reply or ui._shell_reply(cell.msg_id)
    assert reply["payload"] == []  # no cell was put below


def test_the_question_shows_a_carriage_return_bash_would_read(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """`cd build\\r` is a directory that is not there: a question that showed `cd build`
    above `touch moved` would have the user allow a command that runs in the workspace."""
    ui = frontend(start_kernel, "main shell")
    server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": "cd build\r\ntouch moved"})),
        text_reply("Done."),
    )
    cell = ui.send("%%agent --approve ask\nTouch it in build.")
    deny = ui.wait_for_button("Deny")
    question = ui.questions()[-1].state["text"]
    assert "    │ cd build\\r\n    │ touch moved\n" in question
    ui.click(deny)
    ui.finish(cell)
    assert not (workspace / "moved").exists()


@pytest.mark.parametrize(
    ("how", "route"),
    [
        ("Stop button", PUMP),
        ("s key", "main shell"),
        ("kernel interrupt", "main shell"),
        ("kernel interrupt", PUMP),
    ],
)
def test_stopping_while_a_question_waits_aborts_the_run_and_the_call_never_runs(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path, how: str, route: str
) -> None:
    """While the cell waits for an answer it still hears an interrupt, and the Stop
    button sent to the main shell (on the controls' subshell, or read by the pump, which
    holds the interrupt until its read is done). The question's `s` key is the Stop
    button (tests/test_notebook_control_keys.py: a key is heard on every route): on the
    controls' subshell it stands for the click, which tests/test_notebook_stop.py sends
    to the main shell while a command runs."""
    ui = frontend(start_kernel, route)
    server.enqueue(tool_calls_reply(tool_call("c1", "bash", {"command": "touch ran.txt"})))
    cell = ui.send("%%agent --approve ask\nTouch the file.")
    question = ui.wait_for_button("Allow").model  # type: ignore[union-attr]
    if how == "Stop button":
        ui.click(ui.wait_for_button("Stop"))
    elif how == "s key":
        ui.press_key(question, "s")
    else:
        ui.kernel.interrupt()
    ui.finish(cell)

    assert not (workspace / "ran.txt").exists()
    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]
    assert len(records(workspace, "abortRequested")) == 1
    assert results(workspace) == []  # never started: no intent, nothing to answer
    said = "Interrupted" if how == "kernel interrupt" else "Stopped with the Stop button"
    assert f"■ {said}. The abort is recorded" in cell.stdout
    assert "— not answered: the run was stopped" in cell.text(), cell.outputs_by_id
    assert ui.shown_buttons(cell) == ["Resume"]
    no_widget_kept_but_resume = [d for d in cell.outputs()[:-1] if WIDGET_VIEW in d]
    assert no_widget_kept_but_resume == []


def test_allowing_a_tool_for_the_rest_of_the_session_asks_about_it_no_more(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """With nothing configured the run asks (buttons); "Allow bash for the rest of this
    session" answers every later bash call of this kernel's session, in later runs too,
    and no other tool's."""
    ui = frontend(start_kernel, "main shell", approve=None)
    server.enqueue(
        tool_calls_reply(
            tool_call("c1", "bash", {"command": "echo 1 >> log.txt"}),
            tool_call("c2", "bash", {"command": "echo 2 >> log.txt"}),
        ),
        tool_calls_reply(tool_call("c3", "bash", {"command": "echo 3 >> log.txt"})),
        text_reply("Three lines."),
    )
    cell = ui.send("%%agent\nWrite three lines.")
    ui.click(ui.wait_for_button("Allow bash for the rest of this session"))
    ui.finish(cell)
    assert (workspace / "log.txt").read_text() == "1\n2\n3\n"
    assert len(ui.questions()) == 1, "asked more than once"
    assert "allowed by you, with every bash call for the rest of this session" in cell.text()

    # The next run does not ask about bash again; python, another tool, it asks about.
    server.enqueue(
        tool_calls_reply(
            tool_call("c4", "bash", {"command": "echo 4 >> log.txt"}),
            tool_call("c5", "python", {"code": "defined = 1"}),
        ),
        text_reply("One more line; no name."),
    )
    second = ui.send("%%agent\nOne more line, and a name.")
    ui.wait_for_button("Allow python for the rest of this session")
    ui.click(ui.wait_for_button("Deny"))
    ui.finish(second)
    assert (workspace / "log.txt").read_text() == "1\n2\n3\n4\n"
    assert len(ui.questions()) == 2, "bash was asked about again"
    assert [outcome for outcome, _ in results(workspace)][-2:] == ["completed", "denied"]


def test_a_cell_run_without_stdin_shows_no_buttons_and_runs_nothing_it_cannot_ask(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """nbclient, papermill and `tiny-agent-nb demo` run cells with stdin off: nobody is
    there to click, so nothing waits for a click (as `input()` could not ask either), and
    under the default approval the call does not run; the cell says how to choose auto."""
    kernel = start_kernel(shared="widgets", approve=None)  # as frontend(..., approve=None)
    kernel.execute("%load_ext tiny_agent_nb")
    server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": "touch ran.txt"})),
        text_reply("Not run."),
    )
    run = kernel.execute("%%agent\nTouch the file.")
    assert "(no way to ask here: bash was not allowed. `%%agent --approve auto`" in run.stdout
    assert not [d for d in run.displays if WIDGET_VIEW in d]
    assert not (workspace / "ran.txt").exists()
    assert results(workspace)[0][0] == "denied"
    assert [r["options"]["approve"] for r in records(workspace, "runStarted")] == ["ask"]


def test_a_resume_button_becomes_a_record_when_the_next_run_starts(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    ui = frontend(start_kernel, "main shell")
    server.enqueue(tool_calls_reply(tool_call("c1", "bash", {"command": "touch ran.txt"})))
    stopped = ui.send("%%agent --approve ask\nTouch the file.")
    ui.wait_for_button("Allow")
    ui.kernel.interrupt()
    ui.finish(stopped)
    assert ui.shown_buttons(stopped) == ["Resume"]

    server.enqueue(text_reply("Something else."))
    ui.finish(ui.send("%%agent\nSomething else."))
    assert ui.shown_buttons(stopped) == []
    no_widget_kept(stopped)
    assert "↻ `%agent resume` continues the latest stopped run" in stopped.text()


def test_stop_sent_to_the_main_shell_stops_the_run_as_its_answer_streams(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """Without a subshell for the controls the click waits in the main shell's queue; the
    run reads it as its answer streams in (as it does around each tool call) and stops."""
    if int(ipykernel.__version__.split(".")[0]) < 7:
        pytest.skip("the barrier that orders the click before the stream needs ipykernel 7")
    ui = frontend(start_kernel, PUMP)
    release = threading.Event()
    # held after its role and first two pieces of text ("A l", "ong")
    server.enqueue(text_reply("A long answer " * 50, hold=release, hold_after=3))
    cell = ui.send("%%agent\nSay a lot.")
    stop = ui.wait_for_button("Stop")
    server.wait_for_requests(1, timeout=30)
    ui.until(lambda: "A long" in cell.text(), "the answer to start streaming")
    ui.click(stop)
    ui.barrier()  # the click is in the main shell's queue before the rest of the answer
    release.set()
    ui.finish(cell)

    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]
    assert "■ Stopped with the Stop button. The abort is recorded" in cell.stdout
    assert ui.shown_buttons(cell) == ["Resume"]


def test_stop_sent_to_the_main_shell_is_taken_while_the_model_thinks(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """Without a subshell for the controls, the run reads the main shell's queue each
    second the model sends nothing (as it counts them): a Stop pressed while the server
    holds the answer stops the run then, not once the answer comes, and the count is
    gone from the cell."""
    ui = frontend(start_kernel, PUMP)
    server.hold_timeout = 300.0  # far past the cell's timeout: the answer never comes
    server.enqueue(text_reply("Never sent.", hold=threading.Event()))
    cell = ui.send("%%agent\nThink it over.")
    stop = ui.wait_for_button("Stop")
    ui.until(lambda: WAITING_WORDS in cell.text(), "the count in the cell")
    ui.click(stop)
    ui.finish(cell)

    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]
    assert "■ Stopped with the Stop button. The abort is recorded" in cell.stdout
    assert WAITING_WORDS not in cell.text()


def test_cells_queued_while_a_run_reads_clicks_all_run_after_it_in_order(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """Run All: the cells below a `%%agent` cell are sent while it runs. The run reads
    the main shell's queue for clicks and hands every other message back to the kernel,
    which runs each cell after it, once, in order."""
    ui = frontend(start_kernel, "main shell")
    server.enqueue(
        tool_calls_reply(tool_call("c1", "list_files", {"path": "."})), text_reply("Listed.")
    )
    cells = [ui.send("%%agent\nList the files.")]
    cells += [ui.send(f"print('cell {n}')") for n in (1, 2, 3)]
    for cell in cells:
        ui.finish(cell)
    assert "Listed." in cells[0].text()
    assert [c.stdout for c in cells[1:]] == ["cell 1\n", "cell 2\n", "cell 3\n"]
    counts = [ui.execution_count(c) for c in cells]
    assert counts == sorted(counts) and len(set(counts)) == 4
    assert "Duplicate Signature" not in ui.kernel.log_text


def test_a_budget_stop_offers_resume_exactly_when_agent_resume_would_continue(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """The button asks the engine (`%agent resume`'s own rule) whether the run can be
    continued; it never decides that by itself."""
    ui = frontend(start_kernel, "main shell")
    (workspace / "notes.txt").write_text("hello\n")
    server.enqueue(
        tool_calls_reply(
            tool_call("r1", "read_file", {"path": "notes.txt"}), usage=usage(100, 10, cost=0.012)
        ),
        text_reply("never sent"),
    )
    cell = ui.finish(ui.send("%%agent --budget 0.01\nRead the notes."))
    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["budgetLimit"]
    resumable = not isinstance(resumable_operation(load_session(workspace / SESSION)), str)
    assert ui.shown_buttons(cell) == (["Resume"] if resumable else [])


def test_the_kernel_after_a_dead_one_offers_to_resume_the_run_it_settled(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """A run ends `interrupted` when the next kernel settles what a dead one left open:
    that kernel's `%load_ext` offers the Resume button, and a click continues the run."""
    dead = start_kernel()
    dead.execute("%load_ext tiny_agent_nb")
    hold = threading.Event()
    server.enqueue(text_reply("Never read.", hold=hold))
    dead.send("%%agent\nSay something.")
    server.wait_for_requests(1, timeout=30)
    dead.sigkill()
    hold.set()

    server.enqueue(text_reply("Resumed after the crash."))
    ui = WidgetFrontend(start_kernel(shared="widgets"))
    loaded = ui.finish(ui.send("%load_ext tiny_agent_nb"))
    assert "The previous kernel stopped during a run" in loaded.stdout
    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["interrupted"]
    ui.click(ui.wait_for_button("Resume"))
    ui.until(lambda: "Resumed after the crash." in loaded.text(), "the resumed answer")
    started = records(workspace, "runStarted")
    assert [r["operationKind"] for r in started] == ["run", "resume"]


def test_a_saved_notebook_holds_the_controls_stylesheet_once_per_cell(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """A `<style>` in an output applies to the whole page: one per cell (its Stop
    button's record) hides its dead widgets and spent outputs, and its records read
    alone. Every output of every control once repeated it: four copies in a cell with
    one approval, 58 in a notebook of 14 such cells and a timeline."""
    ui = frontend(start_kernel, "main shell")
    cells = []
    for n in range(3):
        server.enqueue(
            tool_calls_reply(tool_call(f"c{n}", "bash", {"command": f"echo {n}"})),
            text_reply(f"Done {n}."),
        )
        cell = ui.send(f"%%agent --approve ask\nRun echo {n}.")
        ui.click(ui.wait_for_button("Allow"))
        cells.append(ui.finish(cell))
    for n, cell in enumerate(cells):
        no_widget_kept(cell)
        assert f'✓ bash command="echo {n}", timeout=120.0 — allowed by you' in cell.text()
        markup = [d["text/html"] for d in cell.outputs() if "tan-control" in d.get("text/html", "")]
        assert len(markup) == 4  # Stop and the approval: each a record and a spent widget
        assert sum(m.count("<style>") for m in markup) == 1, markup
        assert markup[0].startswith(STYLE)  # the first output: what the cell shows first


def test_a_record_marks_code_in_its_own_words_only() -> None:
    # A resume record shows the run's options (a model's name among them, from the
    # session file): their backticks are text, not code.
    record = Record.of("`%agent resume` continues this run{kept}", kept=": model a`<b>`c")
    assert record.text == "`%agent resume` continues this run: model a`<b>`c"
    assert record.html == ("<code>%agent resume</code> continues this run: model a`&lt;b&gt;`c")
