"""The Stop button taken at any moment of a run, in a real kernel, whichever shell the
frontend sends the click to.

JupyterLab 4.4+ sends a widget's clicks on a comm subshell, but only once the kernel has
answered its request to create one: a click on a button just shown goes to the busy main
shell. There the run's pump read it only between two events of the run, so a Stop
pressed while the model was thinking waited for the answer, and one pressed while a
command ran waited for the command (`sleep 60`: a minute), the run going on meanwhile.
The kernel takes the run's controls on a subshell of its own, whatever the frontend
chose: the press is taken at once (the button says "Stopping…"), and the run ends before
any further effect, its abort recorded.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import ipykernel.comm.comm as ipykernel_comm
import pytest
from test_notebook_controls import SESSION, frontend, no_widget_kept, records, results

from tiny_agent_nb.agent import LoopObserver
from tiny_agent_nb.notebook._cell_runs import TickingObserver
from tiny_agent_nb.notebook._controls import RunControls
from tiny_agent_nb.provider import TextDelta
from tiny_agent_nb.render import timeline_html
from tiny_agent_nb.session import CompactionEntry, ToolCall, load_session
from tiny_agent_nb.timeline import build_timeline

from helpers.cli_helpers import cli
from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.mcp_helpers import TEST_SERVER
from helpers.mcp_notebook_helpers import marker_lines
from helpers.openai_server import (
    OpenAIServer,
    context_length_body,
    error_reply,
    text_reply,
    tool_call,
    tool_calls_reply,
)
from helpers.widget_frontend import Model, WidgetFrontend

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

# ipykernel 7.4+: subshells, and a comm may choose the shell that handles its messages
SUBSHELLS = hasattr(getattr(ipykernel_comm, "BaseComm", object), "_reply_subshell_for")


def taken(ui: WidgetFrontend, stop: Model) -> None:
    """The kernel took the press: the button says so (an event, not a time)."""
    ui.until(lambda: stop.state.get("disabled") is True, "the kernel to take the Stop press")
    assert stop.state.get("description") == "Stopping…"


@pytest.mark.skipif(not SUBSHELLS, reason="a subshell for the controls needs ipykernel 7.4")
def test_stop_while_the_model_thinks_ends_the_run_before_its_tool_call_starts(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """The model's answer is held by the server; Stop is pressed meanwhile, on a comm
    subshell. The run ends aborted while the answer is still held: no toolStarted, the
    command never runs. (Sent to the main shell while a request is held: the compaction
    test below, and test_notebook_controls' pump and test_browser_controls' JupyterLab.)"""
    ui = frontend(start_kernel, "comm subshell")
    answer = threading.Event()
    server.enqueue(
        tool_calls_reply(
            tool_call("c1", "bash", {"command": "touch started; sleep 60"}), hold=answer
        )
    )
    cell = ui.send("%%agent\nWait a minute.")
    stop = ui.wait_for_button("Stop")
    server.wait_for_requests(1, timeout=30)
    ui.click(stop)
    taken(ui, stop)
    ui.finish(cell)
    assert server.requests[0].outcome == "pending"  # still held: the run did not wait for it
    answer.set()

    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]
    assert len(records(workspace, "abortRequested")) == 1
    assert records(workspace, "toolStarted") == []
    assert results(workspace) == []
    assert not (workspace / "started").exists()
    assert "■ Stopped with the Stop button. The abort is recorded" in cell.stdout
    assert ui.shown_buttons(cell) == ["Resume"]
    unstuck(ui, server)


def test_an_interrupt_while_the_model_thinks_ends_the_run_before_its_tool_call_starts(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """The toolbar's "interrupt kernel" (SIGINT from outside, as Ctrl-C) while the answer
    is held: the run ends while the request waits, and nothing of the answer runs."""
    ui = frontend(start_kernel, "main shell")
    answer = threading.Event()
    server.enqueue(
        tool_calls_reply(
            tool_call("c1", "bash", {"command": "touch started; sleep 60"}), hold=answer
        )
    )
    cell = ui.send("%%agent\nWait a minute.")
    ui.wait_for_button("Stop")
    server.wait_for_requests(1, timeout=30)
    ui.kernel.interrupt()
    ui.finish(cell)
    assert server.requests[0].outcome == "pending"  # still held: the run did not wait for it
    answer.set()

    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]
    assert records(workspace, "toolStarted") == []
    assert not (workspace / "started").exists()
    assert "■ Interrupted. The abort is recorded" in cell.stdout
    unstuck(ui, server)


@pytest.mark.skipif(not SUBSHELLS, reason="a subshell for the controls needs ipykernel 7.4")
def test_stop_while_a_compaction_is_summarized_ends_the_run_and_keeps_the_context(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """The file read fills the window past its threshold, so the run compacts before its
    next request, and the summary's request is held: Stop, sent to the main shell, is
    taken at once; no compaction is kept, and nothing after the press runs."""
    (workspace / "big.txt").write_text("k" * 8000)  # ~2000 tokens: past 0.8 x 4000 with the rest
    ui = frontend(start_kernel, "main shell")
    ui.finish(
        ui.send(
            "%config TinyAgent.context_window = 4000\n%config TinyAgent.keep_tail_tokens = 1000"
        )
    )
    summary = threading.Event()
    server.enqueue(
        tool_calls_reply(tool_call("r1", "read_file", {"path": "big.txt"})),
        tool_calls_reply(tool_call("c3", "bash", {"command": "touch started"})),
    )
    server.enqueue_summaries(text_reply("SUMMARY let go after the press", hold=summary))
    cell = ui.send("%%agent\nRead big.txt, then touch a file.")
    stop = ui.wait_for_button("Stop")
    ui.until(lambda: any("tools" not in r.body for r in server.requests), "the summary request")
    ui.click(stop)
    taken(ui, stop)
    summary.set()
    ui.finish(cell)

    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]
    state = load_session(workspace / SESSION)
    assert not [e for e in state.entries.values() if isinstance(e.entry, CompactionEntry)]
    assert [r["toolCallId"] for r in records(workspace, "toolStarted")] == ["r1"]
    assert not (workspace / "started").exists()
    ui.finish(ui.send("%config TinyAgent.context_window = 100000"))  # room without compacting
    unstuck(ui, server)


def test_stop_sent_to_the_main_shell_while_a_command_runs_stops_it_and_resume_continues(
    start_kernel: StartKernel,
    server: OpenAIServer,
    workspace: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The main thread is inside the bash tool, and the click was sent to the main shell:
    it is taken at once, not after the command's minute (before ipykernel 7.4, with no
    subshell for the controls, only a comm subshell hears it). The run ends exactly as
    after "interrupt kernel": the command's process group is stopped, abortRequested, the
    call interrupted, the run aborted. The cell, the timeline and the command line say
    the stop the same way, and the Resume button under it continues the run."""
    ui = frontend(start_kernel, "main shell" if SUBSHELLS else "comm subshell")
    server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": "touch started; sleep 60"})),
        text_reply("Finished after resuming."),
    )
    cell = ui.send("%%agent\nWait a minute.")
    stop = ui.wait_for_button("Stop")
    ui.until((workspace / "started").exists, "the command to start")
    ui.click(stop)
    taken(ui, stop)
    ui.finish(cell)

    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]
    assert len(records(workspace, "abortRequested")) == 1
    # interrupted: stopped in its sleep (run to its end, it would be completed)
    assert [outcome for outcome, _ in results(workspace)] == ["interrupted"]
    assert "■ Stopped with the Stop button. The abort is recorded" in cell.stdout
    said_the_same_way(workspace, cell.stdout, capsys)
    # A Resume button under the stopped run; the Stop button is gone from what is kept.
    resume = ui.wait_for_button("Resume")
    assert ui.shown_buttons(cell) == ["Resume"]

    # A click resumes the run as `%agent resume` does, its output under this cell.
    ui.click(resume)
    ui.until(lambda: "Finished after resuming." in cell.text(), "the resumed answer")
    ui.until(lambda: not ui.shown_widgets(cell), "the Resume button to become its record")
    started = records(workspace, "runStarted")
    assert [r["operationKind"] for r in started] == ["run", "resume"]
    assert started[1]["resumesOperationId"] == started[0]["operationId"]
    assert [r["outcome"] for r in records(workspace, "operationFinished")] == [
        "aborted",
        "completed",
    ]
    assert "↻ resumed by you (as `%agent resume`)" in cell.text()
    no_widget_kept(cell)
    unstuck(ui, server)


STOPPED = "stopped with the Stop button"
STOPPED_CALL = f"{STOPPED}; its effects up to then are kept"


def said_the_same_way(workspace: Path, shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A run the Stop button stopped, and the bash call it cut off, in the same words in
    the file, the cell, the timeline and `tiny-agent-nb timeline` / `inspect`; the call
    in a stop's words, never a crash's."""
    assert [r["reason"] for r in records(workspace, "abortRequested")] == [STOPPED]
    assert f"⚠ bash interrupted — {STOPPED_CALL}" in shown
    state = load_session(workspace / SESSION)
    page = timeline_html(build_timeline(state))
    assert f"— {STOPPED_CALL}" in page and STOPPED in page
    _, table, _ = cli(capsys, "timeline", str(workspace / SESSION))
    _, inspected, _ = cli(capsys, "inspect", str(workspace / SESSION))
    assert f"    {STOPPED}\n" in table  # the run's line
    assert f"bash {STOPPED_CALL}" not in table and f"— {STOPPED_CALL}" in table
    assert f"interrupted — {STOPPED_CALL}" in inspected and f"aborted — {STOPPED}" in inspected
    for said in (shown, page, table, inspected):
        assert "it may have run" not in said and "KeyboardInterrupt" not in said


@pytest.mark.skipif(not SUBSHELLS, reason="a subshell for the controls needs ipykernel 7.4")
def test_stop_sent_to_the_main_shell_during_an_mcp_call_cancels_it_at_once(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """The main thread waits for an MCP server's answer (a ten-minute call): the press is
    taken at once, the call is cancelled at the server, and the run ends aborted."""
    marker = workspace / "marker.txt"
    servers = {"tiny": {"command": sys.executable, "args": [str(TEST_SERVER), "stdio"]}}
    kernel = start_kernel(extra={"TINY_AGENT_MCP_SERVERS": json.dumps({"mcpServers": servers})})
    ui = WidgetFrontend(kernel)
    ui.finish(ui.send("%load_ext tiny_agent_nb"))
    nap = {"path": str(marker), "seconds": 600}
    server.enqueue(tool_calls_reply(tool_call("nap", "tiny__mark_and_sleep", nap)))
    cell = ui.send("%%agent\nSleep on it.")
    stop = ui.wait_for_button("Stop")
    ui.until(lambda: "started" in "".join(marker_lines(marker)), "the MCP call to start")
    ui.click(stop)
    taken(ui, stop)
    ui.finish(cell)

    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]
    assert [outcome for outcome, _ in results(workspace)] == ["interrupted"]
    ui.until(lambda: "cancelled" in marker_lines(marker), "the call cancelled at the server")
    unstuck(ui, server)


def unstuck(ui: WidgetFrontend, server: OpenAIServer) -> None:
    """The notebook goes on: the next cell runs a run to its answer."""
    server.enqueue(text_reply("Still here."))
    after = ui.finish(ui.send("%%agent\nAre you there?"))
    assert "Still here." in after.text()


class CountingPump:
    def __init__(self) -> None:
        self.reads = 0

    def pump(self) -> None:
        self.reads += 1


def test_without_a_controls_subshell_clicks_are_read_before_each_call_however_soon() -> None:
    """Where the kernel has no subshell for the controls, the run reads the main shell at
    its events, at most every TICK while the answer streams, but always before a call is
    committed as started and after one returns: a click already sent is read before any
    further effect, however soon after the last read it comes."""
    pump = CountingPump()
    controls = RunControls(pump, publish=lambda *_, **__: None, clock=lambda: 0.0)
    controls.start()
    observer = TickingObserver(LoopObserver(), controls.tick)
    call = ToolCall(id="c1", name="bash", arguments={"command": "true"})
    observer.on_stream(TextDelta("a"))
    observer.on_stream(TextDelta("b"))  # the same moment: not read again
    assert pump.reads == 1
    observer.on_tool_ready(call)
    assert pump.reads == 2
    observer.on_tool_start(call, {"command": "true"})  # just read: not again
    assert pump.reads == 2
    observer.on_tool_end(call, None, "completed")
    assert pump.reads == 3
    controls.finish()


# In the kernel: when the run's end is committed, say so and wait (inside the commit,
# after its write) until the test lets it go: the moment a late Stop press lands in.
HOLD_AT_CLOSE = """
import pathlib, sys, time
_store = get_ipython().magics_manager.registry["AgentMagics"].runtime.store
def _hold_at_close(facts):
    # Recovery's end of a run the kernel left open (interrupted) is not the moment.
    if any(
        getattr(getattr(f, "record", None), "type", "") == "operationFinished"
        and f.record.outcome != "interrupted"
        for f in facts
    ):
        print("RUN CLOSED", flush=True)
        while not pathlib.Path("let-go").exists():
            time.sleep(0.01)
_store.subscribe(_hold_at_close)
"""


@pytest.mark.skipif(not SUBSHELLS, reason="a subshell for the controls needs ipykernel 7.4")
def test_stop_pressed_after_the_run_recorded_its_end_changes_nothing(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """Stop is pressed once the run's end is committed, before its controls close: the
    press is a no-op. The run stays completed, the cell shows its answer and no stop, and
    no KeyboardInterrupt reaches the cell or the next one."""
    ui = frontend(start_kernel, "comm subshell")
    ui.finish(ui.send(HOLD_AT_CLOSE))
    server.enqueue(text_reply("All done."))
    cell = ui.send("%%agent\nFinish.")
    stop = ui.wait_for_button("Stop")
    ui.until(lambda: "RUN CLOSED" in cell.stdout, "the run's end to be committed")
    click = ui.click(stop)
    ui.until(lambda: click in ui.handled, "the kernel to handle the press")
    (workspace / "let-go").touch()
    ui.finish(cell)

    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["completed"]
    assert records(workspace, "abortRequested") == []
    assert "All done." in cell.text()
    assert "Stopped" not in cell.text() and "KeyboardInterrupt" not in cell.text()
    assert ui.execution_count(cell) and cell.reply is not None
    assert cell.reply["status"] == "ok", cell.reply
    after = ui.finish(ui.send("print('next cell')"))
    assert after.stdout == "next cell\n"


# A run that had given its final answer when the kernel lost it (its end not recorded):
# the resume ends at once, completed with that answer.
ANSWERED_NOT_ENDED = """
from tiny_agent_nb.session import facts as F, new_id
_op, _entry, _attempt = new_id(), new_id(), new_id()
_store.commit([F.user_message("Finish.", id=_entry), F.run_started(_op, _entry)])
_store.commit([F.NewFact(F.StepAttempt(operationId=_op, step=1, attempt=1,
    provider="openai-compatible", model="test/model", configurationDigest="sha256:" + "0" * 64),
    _attempt)])
_store.commit([F.assistant_message(_attempt, content="All done.")])
"""
COST_UNKNOWN = "cost unknown for some of this run's requests"


def _refused(server: OpenAIServer, workspace: Path) -> str:
    """An unpriced read, then a request the server refuses for good: a run whose budget
    cannot count what it spent, ended `failed` by the step."""
    (workspace / "big.txt").write_text("w" * 800)
    server.enqueue(
        tool_calls_reply(tool_call("r1", "read_file", {"path": "big.txt"}), usage=None),
        error_reply(400, "the server would not take it"),
    )
    return "%%agent --budget 5\nRead big.txt."


def _too_long(server: OpenAIServer, workspace: Path) -> str:
    """A request refused as too long, a compaction, and the retry refused again: the run
    ends `failed` by the step, with the failure in the end's transaction."""
    (workspace / "big.txt").write_text("w" * 8000)
    refusal = error_reply(400, body=context_length_body(9000, 9500))
    server.enqueue(_read_big(), refusal, refusal)
    server.enqueue_summaries(text_reply("SUMMARY of the read"))
    return (
        "%config TinyAgent.keep_tail_tokens = 10\n"
        "get_ipython().run_cell_magic('agent', '--budget 5', 'Read big.txt.')"
    )


def _read_big() -> dict[str, Any]:
    return tool_calls_reply(tool_call("r1", "read_file", {"path": "big.txt"}), usage=None)


def _answered(server: OpenAIServer, workspace: Path) -> str:
    return ANSWERED_NOT_ENDED + "get_ipython().run_line_magic('agent', 'resume')"


# Each end a step or the loop commits, reached with the Stop button live: how, the
# outcome, what the cell shows of it, whether the end's detail keeps the budget's note.
ENDS = {
    "a request the server refused": (_refused, "failed", "the server would not take it", True),
    "a request still too long after compacting": (_too_long, "failed", "too long", True),
    "a resume that finds the answer saved": (_answered, "completed", "All done.", False),
}


@pytest.mark.skipif(not SUBSHELLS, reason="a subshell for the controls needs ipykernel 7.4")
@pytest.mark.parametrize("end", ENDS)
def test_stop_pressed_while_any_end_is_committed_changes_nothing(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path, end: str
) -> None:
    """As above, for the ends the model step commits with what failed, and for a resume
    that ends as soon as it starts: the press is a no-op, and the cell says the end the
    file holds. A run that said its costs were unknown keeps that in its end's detail."""
    prepare, outcome, said, noted = ENDS[end]
    ui = frontend(start_kernel, "comm subshell")
    ui.finish(ui.send(HOLD_AT_CLOSE))
    cell = ui.send(prepare(server, workspace))
    stop = ui.wait_for_button("Stop")
    ui.until(lambda: "RUN CLOSED" in cell.stdout, "the run's end to be committed")
    click = ui.click(stop)
    ui.until(lambda: click in ui.handled, "the kernel to handle the press")
    (workspace / "let-go").touch()
    ui.finish(cell)

    (finished,) = [
        r for r in records(workspace, "operationFinished") if r["outcome"] != "interrupted"
    ]
    assert finished["outcome"] == outcome, finished
    assert records(workspace, "abortRequested") == []
    assert said in cell.text()
    assert "Stopped" not in cell.text() and "KeyboardInterrupt" not in cell.text()
    assert (COST_UNKNOWN in (finished.get("detail") or "")) == noted, finished
    assert ui.execution_count(cell) and cell.reply is not None
    assert cell.reply["status"] == "ok", cell.reply
    after = ui.finish(ui.send("print('next cell')"))
    assert after.stdout == "next cell\n"


@pytest.mark.skipif(not SUBSHELLS, reason="a subshell for the controls needs ipykernel 7.4")
def test_controls_are_heard_after_a_client_deleted_the_controls_subshell(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """Any client of the kernel may list its subshells and delete them, the controls'
    one too. The next run's clicks are still heard (the kernel makes a new subshell),
    not sent to a subshell that is gone."""
    ui = frontend(start_kernel, "main shell", shared=False)  # the subshells it lists are its own
    server.enqueue(text_reply("First."))
    ui.finish(ui.send("%%agent\nFirst."))  # the first run's Stop made the subshell
    made = ui.control("list_subshell_request")["subshell_id"]
    assert len(made) == 1
    ui.control("delete_subshell_request", subshell_id=made[0])

    server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": "touch allowed.txt"})),
        text_reply("Done."),
    )
    cell = ui.send("%%agent --approve ask\nTouch the file.")
    ui.click(ui.wait_for_button("Allow"))
    ui.finish(cell)
    assert (workspace / "allowed.txt").exists()
    assert "Done." in cell.text()
    remade = ui.control("list_subshell_request")["subshell_id"]
    assert len(remade) == 1 and remade != made


# In the kernel: its shell channel thread makes subshells slowly (until the test lets it),
# or cannot make them at all; the controls wait SUBSHELL_START_TIMEOUT for one.
SLOW_SUBSHELLS = """
import pathlib, time
import tiny_agent_nb.notebook._comm_pump as _pump
_pump.SUBSHELL_START_TIMEOUT = 0.2
_manager = get_ipython().kernel.shell_channel_thread.manager
_real_create = _manager._create_subshell
def _slow_create():
    while not pathlib.Path("let-go").exists():
        time.sleep(0.01)
    return _real_create()
_manager._create_subshell = _slow_create
"""
FAILING_SUBSHELLS = """
def _failing_create():
    raise RuntimeError("no thread for you")
get_ipython().kernel.shell_channel_thread.manager._create_subshell = _failing_create
"""


@pytest.mark.skipif(not SUBSHELLS, reason="a subshell for the controls needs ipykernel 7.4")
@pytest.mark.parametrize("making", ["slow", "failing"])
def test_a_controls_subshell_that_cannot_be_made_in_time_leaves_the_pump_to_hear_clicks(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path, making: str
) -> None:
    """The run goes on without the subshell: its clicks, sent to the main shell, are read
    by the pump; the kernel asks for a subshell once (a slow one made after the wait gave
    up is the one later controls use: no second subshell, no second wait), and the cell
    shows nothing of it."""
    ui = frontend(start_kernel, "main shell", shared=False)  # a kernel with no subshell yet
    ui.finish(ui.send(SLOW_SUBSHELLS if making == "slow" else FAILING_SUBSHELLS))
    server.enqueue(
        tool_calls_reply(tool_call("c1", "bash", {"command": "touch allowed.txt"})),
        text_reply("Done."),
    )
    cell = ui.send("%%agent --approve ask\nTouch the file.")
    ui.wait_for_button("Stop")
    (workspace / "let-go").touch()
    ui.click(ui.wait_for_button("Allow"))
    ui.finish(cell)
    assert (workspace / "allowed.txt").exists()
    assert "Done." in cell.text()
    assert "Traceback" not in cell.text() and "subshell" not in cell.text()
    made = ui.control("list_subshell_request")["subshell_id"]
    assert len(made) == (1 if making == "slow" else 0)


SWALLOWS_INTERRUPTS = (
    "import time\n"
    "try:\n"
    "    open('sleeping', 'w').close()\n"
    "    time.sleep(60)\n"
    "except KeyboardInterrupt:\n"
    "    print('swallowed')\n"
)


@pytest.mark.skipif(not SUBSHELLS, reason="a subshell for the controls needs ipykernel 7.4")
def test_stop_swallowed_by_the_code_it_interrupted_still_stops_the_run_before_the_next_call(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """The model's python code catches KeyboardInterrupt: the press's interrupt ends the
    sleep but not the run. The run still stops at its next step, before the answer's
    next call starts (the button, disabled once pressed, could not be pressed again)."""
    ui = frontend(start_kernel, "main shell")
    server.enqueue(
        tool_calls_reply(
            tool_call("p1", "python", {"code": SWALLOWS_INTERRUPTS}),
            tool_call("c2", "bash", {"command": "touch after"}),
        ),
        text_reply("Carried on."),
    )
    cell = ui.send("%%agent\nSleep, then touch a file.")
    stop = ui.wait_for_button("Stop")
    ui.until((workspace / "sleeping").exists, "the code to start sleeping")
    ui.click(stop)
    taken(ui, stop)
    ui.finish(cell)

    assert not (workspace / "after").exists(), (cell.text(), results(workspace))
    assert [r["outcome"] for r in records(workspace, "operationFinished")] == ["aborted"]
    assert [r["toolCallId"] for r in records(workspace, "toolStarted")] == ["p1"]
    assert "■ Stopped with the Stop button. The abort is recorded" in cell.stdout


@pytest.mark.skipif(not SUBSHELLS, reason="a subshell for the controls needs ipykernel 7.4")
def test_an_earlier_runs_stop_button_clicked_during_a_later_run_stops_nothing(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    """A frontend that still shows the first run's Stop button (its close not drawn yet)
    sends its click while the second run waits for its answer: the second run is not
    stopped, and Stop pressed twice on its own button is one stop."""
    ui = frontend(start_kernel, "comm subshell")
    server.enqueue(text_reply("First."))
    first = ui.send("%%agent\nFirst.")
    old = ui.wait_for_button("Stop")
    ui.finish(first)
    answer = threading.Event()
    server.enqueue(text_reply("Second.", hold=answer))
    second = ui.send("%%agent\nSecond.")
    ui.wait_for_button("Stop")
    server.wait_for_requests(2, timeout=30)
    click = ui.click(old)
    ui.until(lambda: click in ui.handled, "the kernel to handle the old press")
    answer.set()
    ui.finish(second)
    assert "Second." in second.text()
    assert [r["outcome"] for r in records(workspace, "operationFinished")] == 2 * ["completed"]

    hold = threading.Event()
    server.enqueue(text_reply("Third.", hold=hold))
    third = ui.send("%%agent\nThird.")
    stop = ui.wait_for_button("Stop")
    server.wait_for_requests(3, timeout=30)
    ui.click(stop)
    ui.click(stop)
    taken(ui, stop)
    ui.finish(third)
    hold.set()
    assert third.reply is None or third.reply["status"] == "ok"
    assert third.stdout.count("■ Stopped with the Stop button") == 1
    assert [r["outcome"] for r in records(workspace, "operationFinished")][-1] == "aborted"
    unstuck(ui, server)
