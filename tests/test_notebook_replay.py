"""Restart & Run All reproduces a notebook (docs/spec.md §12), in real IPython kernels
(jupyter_client) over a loopback model server that counts its requests: an `%%agent` cell
executed again with the same cell id, prompt and options replays its recorded run (its
`python` calls run again, nothing else, no request sent); a changed prompt, `--rerun`,
asks again; a stopped run is shown stopped, not continued."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.session import load_session

from helpers.ipython_shell import shell
from helpers.kernel_helpers import Execution, Kernel, StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until

__all__ = ["shell", "start_kernel", "workspace"]  # the fixtures, from the helpers

SESSION = "analysis.agent.jsonl"
REPLAYED = "↻ replayed from the session: 0 model calls, $0"
DEFINE = "answer = 6 * 7\ndef double(x):\n    return 2 * x"
CELLS = {
    "cell-define": "%%agent\nDefine the answer and a doubling function.",
    "cell-log": "%%agent\nLog a line to log.txt.",
    "cell-propose": "%%agent\nPropose a cell that prints the answer.",
}


def run_cell(kernel: Kernel, code: str, cell_id: str | None) -> Execution:
    """Execute `code` as a notebook frontend does, with its cell id (nbformat 4.5) in the
    request's metadata, as JupyterLab sends it."""
    return kernel.collect(send_cell(kernel, code, cell_id))


def send_cell(kernel: Kernel, code: str, cell_id: str | None) -> Execution:
    content = {
        "code": code,
        "silent": False,
        "store_history": True,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": False,
    }
    msg = kernel.kc.session.msg("execute_request", content, metadata={"cellId": cell_id})
    kernel.kc.shell_channel.send(msg)
    return Execution(msg_id=msg["header"]["msg_id"])


def clean(run: Execution) -> str:
    assert run.error is None, run.error
    assert "Traceback" not in run.stdout + run.stderr, run.stdout + run.stderr
    return run.stdout


def proposals(run: Execution) -> list[object]:
    assert run.reply is not None
    return [p for p in run.reply.get("payload", []) if p.get("source") == "set_next_input"]


def answers(run: Execution) -> str:
    return "".join(d.get("text/plain", "") for d in run.displays)


def _script(server: OpenAIServer) -> None:
    server.enqueue(
        tool_calls_reply(tool_call("p1", "python", {"code": DEFINE})),
        text_reply("Defined answer and double."),
        tool_calls_reply(tool_call("b1", "bash", {"command": "echo logged >> log.txt"})),
        text_reply("Logged."),
        tool_calls_reply(tool_call("c1", "propose_cell", {"code": "print(answer)"})),
        text_reply("Proposed a cell."),
    )


def _run_all(kernel: Kernel) -> dict[str, Execution]:
    clean(run_cell(kernel, "%load_ext tiny_agent_nb", "cell-load"))
    return {cell_id: run_cell(kernel, code, cell_id) for cell_id, code in CELLS.items()}


def test_run_all_after_a_restart_replays_every_agent_cell_without_asking_the_model(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    _script(server)
    kernel = start_kernel(shared=True)
    first = _run_all(kernel)
    assert len(server.requests) == 6
    assert proposals(first["cell-propose"]) != []
    assert (workspace / "log.txt").read_text() == "logged\n"

    kernel.restart()
    again = _run_all(kernel)
    assert len(server.requests) == 6  # nothing was sent
    for cell_id, run in again.items():
        out = clean(run)
        print(f"--- {cell_id}\n{out}{answers(run)}")
        assert REPLAYED in out
        assert proposals(run) == []
    assert '✓ python code="answer = 6 * 7' in again["cell-define"].stdout
    assert "— completed; ran again: completed" in again["cell-define"].stdout
    assert "✓ bash command=" in again["cell-log"].stdout
    assert "— completed; not re-run" in again["cell-log"].stdout
    assert "✓ propose_cell" in again["cell-propose"].stdout
    assert "Defined answer and double." in answers(again["cell-define"])
    # The names the agent defined exist again; the world was left alone.
    assert clean(run_cell(kernel, "print(answer, double(4))", None)) == "42 8\n"
    assert (workspace / "log.txt").read_text() == "logged\n"

    state = load_session(workspace / SESSION)
    kinds = [(op.kind, op.status) for op in state.operations.values()]
    assert kinds == [("run", "completed")] * 3 + [("replay", "completed")] * 3
    python = [i for i in state.tool_intents.values() if i.tool.name == "python"]
    assert [(i.operation_id == python[0].operation_id, i.status) for i in python] == [
        (True, "completed"),
        (False, "completed"),
    ]
    assert state.attempts and all(
        a.operation_id in {op.id for op in state.operations.values() if op.kind == "run"}
        for a in state.attempts.values()
    )

    # `%agent status` and the timeline tell replayed runs from asked ones.
    status = clean(run_cell(kernel, "%agent status", None))
    assert "runs     6 (3 replayed from the session, no model call)" in status
    assert "latest   replay completed" in status
    timeline = run_cell(kernel, "%agent timeline", None)
    html = "".join(d.get("text/html", "") for d in timeline.displays)
    assert "↻ replays run 1 from the session (no model call)" in html

    # The next prompt's restart notice names what the replay restored; the replay's
    # results are no part of the conversation.
    server.enqueue(text_reply("Still here."))
    clean(run_cell(kernel, "%%agent\nWhat is defined?", "cell-new"))
    messages = server.requests[6].body["messages"]
    told = next(
        m["content"] for m in messages if m["role"] == "user" and "restarted" in m["content"]
    )
    assert "Defined again since" in told and "answer, double" in told
    assert sum(1 for m in messages if m["role"] == "tool") == 3


def test_a_changed_prompt_or_rerun_asks_the_model_again(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(text_reply("One."), text_reply("Two."), text_reply("Three."))
    kernel = start_kernel(shared=True)
    clean(run_cell(kernel, "%load_ext tiny_agent_nb", "cell-load"))
    clean(run_cell(kernel, "%%agent\nSay one.", "cell-a"))
    assert REPLAYED in clean(run_cell(kernel, "%%agent\nSay one.", "cell-a"))
    assert len(server.requests) == 1
    changed = run_cell(kernel, "%%agent\nSay two.", "cell-a")
    assert REPLAYED not in clean(changed) and "Two." in answers(changed)
    rerun = run_cell(kernel, "%%agent --rerun\nSay two.", "cell-a")
    assert REPLAYED not in clean(rerun) and "Three." in answers(rerun)
    assert len(server.requests) == 3
    # another cell with the same prompt is another cell
    server.enqueue(text_reply("Four."))
    assert REPLAYED not in clean(run_cell(kernel, "%%agent\nSay two.", "cell-b"))
    # changed options are a new run too
    server.enqueue(text_reply("Five."))
    assert REPLAYED not in clean(run_cell(kernel, "%%agent --max-steps 3\nSay two.", "cell-b"))
    assert len(server.requests) == 5


def test_a_stopped_run_is_shown_stopped_and_not_continued(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(tool_calls_reply(tool_call("r1", "read_file", {"path": "notes.txt"})))
    (workspace / "notes.txt").write_text("hi\n")
    kernel = start_kernel(shared=True)
    clean(run_cell(kernel, "%load_ext tiny_agent_nb", "cell-load"))
    stopped = clean(run_cell(kernel, "%%agent --max-steps 1\nRead the notes.", "cell-a"))
    assert "stepLimit" in stopped or "step" in stopped
    kernel.restart()
    clean(run_cell(kernel, "%load_ext tiny_agent_nb", "cell-load"))
    shown = clean(run_cell(kernel, "%%agent --max-steps 1\nRead the notes.", "cell-a"))
    assert "This cell's run ended stepLimit" in shown
    assert "Nothing was sent" in shown and "`%agent resume`" in shown
    assert len(server.requests) == 1
    kinds = [op.kind for op in load_session(workspace / SESSION).operations.values()]
    assert kinds == ["run"]


def test_a_replay_needs_no_model_configured(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(
        tool_calls_reply(tool_call("p1", "python", {"code": DEFINE})),
        text_reply("Defined."),
    )
    first = start_kernel(shared=True)
    clean(run_cell(first, "%load_ext tiny_agent_nb", "cell-load"))
    clean(run_cell(first, CELLS["cell-define"], "cell-define"))
    first.shutdown()

    bare = start_kernel(shared=True, base_url=None, model=None)  # no base URL, no key, no model
    clean(run_cell(bare, "%load_ext tiny_agent_nb", "cell-load"))
    out = clean(run_cell(bare, CELLS["cell-define"], "cell-define"))
    assert REPLAYED in out, out
    assert clean(run_cell(bare, "print(double(answer))", None)) == "84\n"
    assert len(server.requests) == 2


def test_a_crash_inside_a_replayed_call_leaves_it_interrupted_and_not_run_again(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    started, release = workspace / "started", workspace / "release"
    code = (
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).write_text('x')\n"
        f"while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.05)\n"
        "slow = 1"
    )
    server.enqueue(tool_calls_reply(tool_call("p1", "python", {"code": code})), text_reply("Ok."))
    release.write_text("go")
    first = start_kernel(shared=True)
    clean(run_cell(first, "%load_ext tiny_agent_nb", "cell-load"))
    clean(run_cell(first, "%%agent\nWait a little.", "cell-wait"))
    release.unlink()
    started.unlink()

    first.restart()
    clean(run_cell(first, "%load_ext tiny_agent_nb", "cell-load"))
    send_cell(first, "%%agent\nWait a little.", "cell-wait")
    wait_until(started.exists, what="the replayed python call running")
    first.sigkill()
    started.unlink()
    release.write_text("go")  # were it run again, it would write `started` and end

    second = start_kernel(shared=True)
    opened = clean(run_cell(second, "%load_ext tiny_agent_nb", "cell-load"))
    assert "interrupted" in opened
    state = load_session(workspace / SESSION)
    assert [(op.kind, op.status) for op in state.operations.values()] == [
        ("run", "completed"),
        ("replay", "interrupted"),
    ]
    statuses = [i.status for i in state.tool_intents.values()]
    assert statuses == ["completed", "interrupted"]
    assert not started.exists()  # recovery ran nothing again
    assert len(server.requests) == 2
    # Executed again, the cell replays its run (the replay that died is no run of it).
    out = clean(run_cell(second, "%%agent\nWait a little.", "cell-wait"))
    assert REPLAYED in out and started.exists()
    assert len(server.requests) == 2


def test_under_ask_one_question_shows_all_the_code_and_a_no_runs_none_of_it(
    shell: InteractiveShell,
    server: OpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In-process, the cell id given as a frontend gives it; without one (a terminal)
    the same words typed again ask the model again."""
    server.enqueue(
        tool_calls_reply(
            tool_call("p1", "python", {"code": "first = 1"}),
            tool_call("p2", "python", {"code": "second = 2"}),
        ),
        text_reply("Defined two names."),
    )
    questions: list[str] = []
    answers = iter(["y", "y", "n", "y"])

    def answer(question: str) -> str:
        questions.append(question)
        return next(answers)

    monkeypatch.setattr("builtins.input", answer)
    shell.run_line_magic("load_ext", "tiny_agent_nb")
    cell = "%%agent --approve ask\nDefine two names."

    def run(cell_id: str | None = "cell-1") -> None:
        assert shell.run_cell(cell, cell_id=cell_id).error_in_exec is None

    run()
    assert len(questions) == 2 and len(server.requests) == 2
    for name in ("first", "second"):
        del shell.user_ns[name]
    capsys.readouterr()

    run()  # asked once, answered no
    denied = capsys.readouterr().out
    assert len(questions) == 3
    assert "first = 1" in denied and "second = 2" in denied  # all the code, in one question
    assert "not run again: denied" in denied and REPLAYED in denied
    assert "first" not in shell.user_ns and "second" not in shell.user_ns

    run()  # asked once, answered yes
    assert len(questions) == 4
    assert (shell.user_ns["first"], shell.user_ns["second"]) == (1, 2)
    assert len(server.requests) == 2
    server.enqueue(text_reply("Asked again."))
    run(cell_id=None)  # no cell id: nothing tells this cell from another, so it asks
    assert len(server.requests) == 3
    state = load_session(Path.cwd() / SESSION)
    replays = [op.id for op in state.operations.values() if op.kind == "replay"]
    outcomes = [i.status for i in state.tool_intents.values() if i.operation_id in replays]
    assert outcomes == ["denied", "denied", "completed", "completed"]
