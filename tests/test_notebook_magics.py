"""The magics in an in-process IPython shell, against the loopback OpenAI server.

(Real kernels, SIGKILL and nbclient are in test_notebook_kernel.py / test_notebooks.py.)
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb._guard import ADOPTS
from tiny_agent_nb.notebook._commands import fill_prompt
from tiny_agent_nb.notebook._loops import ASKING
from tiny_agent_nb.notebook._timeline_view import TimelineView
from tiny_agent_nb.session import HeaderInit, SessionStore, ToolIdentity, load_session, new_id
from tiny_agent_nb.session import facts as f

from helpers.ipython_shell import KEY, OFFLINE, fresh_shell, run, shell
from helpers.openai_server import (
    OpenAIServer,
    error_reply,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage,
)
from helpers.scenario import BASH, Run

__all__ = ["shell"]  # the fixture, from ipython_shell


def test_a_test_shell_is_released_when_its_test_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The test suite's own hygiene: IPython's atexit hooks and history thread would keep
    every shell of a worker alive, each running a full gc.collect() at the worker's exit."""
    shells = fresh_shell(tmp_path, monkeypatch, OFFLINE)
    shell = next(shells)
    run(shell, "%load_ext tiny_agent_nb", capsys)
    history_thread = weakref.ref(shell.history_manager.save_thread)
    released = weakref.ref(shell)
    del shell
    assert next(shells, None) is None  # the fixture's teardown
    monkeypatch.undo()  # the test process's __main__ back (the monkeypatch fixture's teardown)
    gc.collect()
    assert released() is None
    assert history_thread() is None  # stopped, and nothing holds it
    assert "IPythonHistorySavingThread" not in {t.name for t in threading.enumerate()}


def test_load_ext_creates_the_session_beside_the_notebook(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(shell, "%load_ext tiny_agent_nb", capsys)
    assert "new session analysis.agent.jsonl (beside this notebook)" in out
    assert (tmp_path / "analysis.agent.jsonl").exists()


def test_a_cell_runs_a_tool_streams_and_fills_variables(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(
        tool_calls_reply(
            tool_call("b1", "bash", {"command": "echo ran >> marker.txt"}),
            content="Appending now.",
        ),
        text_reply("Appended **once**.", usage=usage(30, 4, cost=0.002)),
    )
    run(shell, "n = 3", capsys)
    out = run(shell, '%%agent\nAppend to the marker {n} times, json stays {"a": 1}', capsys)
    assert "→ bash" in out and "✓ bash completed" in out and "Appended **once**." in out
    # Text of a tool-calling step is shown only as it streams (the final answer is the
    # only one printed at the end), and before the tool's line.
    assert out.index("Appending now.") < out.index("→ bash")
    sent = server.requests[0].body["messages"][-1]["content"]
    assert sent == 'Append to the marker 3 times, json stays {"a": 1}'
    assert (tmp_path / "marker.txt").read_text() == "ran\n"
    state = load_session(tmp_path / "analysis.agent.jsonl")
    assert [o.status for o in state.operations.values()] == ["completed"]
    status = run(shell, "%agent status", capsys)
    assert "latest   run completed" in status
    usage_out = run(shell, "%agent usage", capsys)
    assert "$0.002" in usage_out


def test_bad_arguments_are_one_line_usage_errors_that_send_and_print_nothing_else(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    bad = {
        "%agent bogus": "unknown command 'bogus'",
        "%agent": "%agent needs a command: status, timeline,",
        "%%agent status\nhi": "%%agent takes options only, not 'status'",
        "%%agent --max-steps x\nhello": "argument --max-steps: invalid int value: 'x'",
        "%%agent --max-steps 0\nhello": "--max-steps must be at least 1",
        "%%agent --approve maybe\nhello": "argument --approve: invalid choice",
        "%%agent\n   ": "%%agent needs a prompt in the cell body",
        "%agent status now": "%agent status takes no argument",
        "%agent fork x": "%agent fork RUN: a run's number as the timeline shows it, not 'x'",
        "%agent fork 0": "%agent fork RUN: a run's number as the timeline shows it, not '0'",
        "%agent fork 1 2": "%agent fork takes one RUN",
        "%agent status --budget 1": "%agent status takes no --budget",
        "%agent new --model x": "%agent new takes no --model",
        "%agent compact --max-steps 3": "%agent compact takes no --max-steps",
        "%agent usage --demo": "--demo goes with %%agent, %agent resume and %agent compact",
        "%agent help nonsense": "unknown command 'nonsense'",
        "%agent help status usage": "%agent help takes one COMMAND",
    }
    for code, expected in bad.items():
        result = shell.run_cell(code)
        out = capsys.readouterr()
        assert type(result.error_in_exec).__name__ == "UsageError", code
        assert out.out == "", (code, out)  # IPython's usage error: no traceback
        assert out.err.startswith(f"UsageError: {expected}"), (code, out.err)
        assert out.err.count("\n") == 1, (code, out.err)
    assert server.requests == []
    # Nothing was done: no run, and `%agent new --model x` left no second file.
    assert "runs     0;" in run(shell, "%agent status", capsys)
    assert not list(Path.cwd().glob("*.agent.1.jsonl"))


def test_help_is_the_docstring(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    out = run(shell, "%agent help", capsys)
    assert out.startswith("%agent [--model MODEL]")  # the usage, not reST markup
    docstring = shell.magics_manager.magics["cell"]["agent"].__doc__ or ""
    assert docstring.startswith("%agent [--model MODEL]") and "::" not in docstring
    assert "%%agent [--model M] [--max-steps N] [--tools a,b,srv__*]" in out
    assert "%agent timeline      live timeline (runs" in out
    asked = run(shell, "%%agent?", capsys)  # a kernel's pager payload, printed here
    assert "Run a prompt through the durable agent loop" in asked
    assert "%agent resume [--budget USD]" in asked
    assert "continue the latest run that was interrupted, aborted," in asked


def test_provider_errors_are_one_readable_line(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(error_reply(404, "No endpoints found for test/model."))
    out = run(shell, "%%agent\nhi", capsys)
    asked, failed = out.splitlines()  # the kernel's first cell asks for the window first
    assert asked == f"Note: {ASKING}" and failed.startswith("✗ The run failed:")
    assert "The model id 'test/model'" in out  # our explanation, not only the server's words
    assert "Traceback" not in out


def test_missing_key_for_openrouter_commits_nothing(
    shell: InteractiveShell,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("TINY_AGENT_API_KEY")
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    monkeypatch.delenv("TINY_AGENT_BASE_URL")
    monkeypatch.setenv("TINY_AGENT_DEMO", "0")  # no offline demo model to fall back on
    run(shell, "%load_ext tiny_agent_nb", capsys)
    opened = load_session(tmp_path / "analysis.agent.jsonl").last_seq  # this kernel's record
    out = run(shell, "%%agent\nhi", capsys)
    assert "no API key for OpenRouter" in out and "OPENROUTER_API_KEY" in out
    assert load_session(tmp_path / "analysis.agent.jsonl").last_seq == opened


def test_the_key_never_shows(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(error_reply(401, "invalid key"), text_reply("ok"))
    out = run(shell, "%%agent\none", capsys) + run(shell, "%%agent\ntwo", capsys)
    config = run(shell, "%config TinyAgent", capsys)
    assert "Current: Secret('****')" in config
    out += config + run(shell, "%agent status", capsys)
    assert KEY not in out
    assert KEY not in (tmp_path / "analysis.agent.jsonl").read_text()
    assert server.requests[1].headers["authorization"] == f"Bearer {KEY}"


def test_new_keeps_the_old_conversation_and_session_switches(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(text_reply("first"))
    run(shell, "%%agent\nhello", capsys)
    out = run(shell, "%agent new", capsys)
    assert "analysis.agent.1.jsonl" in out
    assert load_session(tmp_path / "analysis.agent.1.jsonl").operations
    assert not load_session(tmp_path / "analysis.agent.jsonl").operations
    (tmp_path / "elsewhere").mkdir()  # a session's directory must exist
    out = run(shell, "%agent session elsewhere/other.jsonl", capsys)
    assert "new session other.jsonl" in out
    assert run(shell, "%agent session", capsys).strip().endswith("elsewhere/other.jsonl")


def test_each_cell_continues_the_conversation(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(text_reply("first answer"), text_reply("second answer"))
    run(shell, "%%agent\nfirst question", capsys)
    run(shell, "%%agent\nsecond question", capsys)
    roles = [(m["role"], m["content"]) for m in server.requests[1].body["messages"][1:]]
    assert roles == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "second question"),
    ]


def test_the_context_goes_on_across_cells_and_starts_over_on_new(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each cell sends the open session's conversation with its own system prompt; a
    new session's first cell sends only its prompt."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(text_reply("a1"), text_reply("a2"), text_reply("b1"))
    run(shell, "%%agent\nq1", capsys)
    run(shell, "%config TinyAgent.system_prompt = 'be terse'", capsys)
    run(shell, "%%agent\nq2", capsys)
    second = server.requests[1].body["messages"]
    assert second[0] == {"role": "system", "content": "be terse"}
    assert [(m["role"], m["content"]) for m in second[1:]] == [
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
    ]
    run(shell, "%agent new", capsys)
    run(shell, "%%agent\nq3", capsys)
    assert server.requests[2].body["messages"] == [
        {"role": "system", "content": "be terse"},
        {"role": "user", "content": "q3"},
    ]


class Shown:
    """A view's publisher that keeps what the frontend would show under each display id."""

    def __init__(self, fail: bool = False) -> None:
        self.bundles: dict[str, dict[str, str]] = {}
        self.updates = 0
        self.fail = fail

    def __call__(self, bundle: dict[str, str], *, display_id: str, update: bool) -> None:
        assert update == (display_id in self.bundles)
        self.updates += update
        if self.fail and update:
            raise RuntimeError("the frontend is gone")
        self.bundles[display_id] = bundle

    @property
    def latest(self) -> dict[str, str]:
        (bundle,) = self.bundles.values()
        return bundle


def test_timeline_view_follows_commits(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    shown = Shown()
    view = TimelineView(
        shell.magics_manager.registry["AgentMagics"].runtime, live=True, publish=shown
    )
    view.show()
    assert "No runs yet" in shown.latest["text/html"]
    server.enqueue(tool_calls_reply(tool_call("r1", "list_files", {})), text_reply("done"))
    run(shell, "%%agent\nlist", capsys)
    bundle = shown.latest
    assert 'data-status="completed"' in bundle["text/html"]
    assert 'data-tool="list_files"' in bundle["text/html"]
    assert set(bundle) == {"text/html", "text/plain"}
    assert "completed" in bundle["text/plain"]


def test_a_timeline_that_fails_to_update_does_not_fail_the_run(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Updates come from commits in the middle of the run: they are caught and logged."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    shown = Shown(fail=True)
    runtime = shell.magics_manager.registry["AgentMagics"].runtime
    TimelineView(runtime, live=True, publish=shown).show()
    server.enqueue(tool_calls_reply(tool_call("r1", "list_files", {})), text_reply("done"))
    out = run(shell, "%%agent\nlist", capsys)
    assert "✓ list_files completed" in out and "done" in out
    assert shown.updates >= 2  # it was asked, and failed, more than once
    assert [o.status for o in runtime.require_store().load().operations.values()] == ["completed"]


def test_fill_prompt_leaves_unknown_names_and_escapes() -> None:
    ns = {"x": 1}
    assert fill_prompt("{x} {y} {{x}} {'k': 1}", ns) == "1 {y} {x} {'k': 1}"


def test_timeline_draws_facts_committed_just_before_a_long_wait(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A burst of commits inside the throttle interval is still drawn shortly after."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    magics = shell.magics_manager.registry["AgentMagics"]
    shown = Shown()
    TimelineView(magics.runtime, live=True, publish=shown).show()
    store = magics.runtime.require_store()
    steps = Run(environment=str(tmp_path))
    store.commit(steps.start("long job"))  # a milestone: drawn at once
    store.commit(steps.attempt())  # within the interval: drawn by the trailing render
    deadline = time.monotonic() + 5
    while 'data-status="pending"' not in shown.latest["text/html"]:
        assert time.monotonic() < deadline, "the pending attempt was never drawn"
        time.sleep(0.01)


def test_without_key_or_server_the_offline_demo_model_runs_and_says_so(
    shell: InteractiveShell,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("TINY_AGENT_API_KEY")
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    monkeypatch.delenv("TINY_AGENT_BASE_URL")
    out = run(shell, "%load_ext tiny_agent_nb", capsys)
    assert "OFFLINE DEMO MODEL (SCRIPTED, NOT A REAL LLM)" in out
    out = run(shell, "%%agent\nPlease run\n```bash\necho demo >> marker.txt\n```", capsys)
    assert "[offline demo model (scripted, not a real LLM)]" in out
    assert "→ bash" in out and "✓ bash completed" in out
    assert (tmp_path / "marker.txt").read_text() == "demo\n"
    state = load_session(tmp_path / "analysis.agent.jsonl")
    assert state.header.provider == "offline-demo"
    assert {a.provider for a in state.attempts.values()} == {"offline-demo"}
    out = run(shell, "%agent timeline", capsys)  # a terminal: the timeline's text
    assert "OFFLINE DEMO MODEL (scripted, not a real LLM)" in out


def test_usage_per_run_counts_the_tools_usage_too(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run's line in `%agent usage` sums its whole ledger, tools' usage included (an MCP
    tool may report some), so the runs add up to the total line."""
    path = tmp_path / "with-tool-usage.agent.jsonl"
    init = HeaderInit(cwd=str(tmp_path), provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        operation = Run(environment="/w")
        store.commit(operation.start("q"))
        store.commit(operation.attempt())
        store.commit(operation.answer(None, [("c1", "bash", {"command": "ls"})], cost=0.25))
        intent = operation.intent("c1", BASH, {"command": "ls"})
        assert intent.id is not None
        spent = f.usage(tool_started_id=intent.id, input_tokens=7, output_tokens=3, cost=0.5)
        store.commit([intent, spent, Run.result(intent, "out")])
        store.commit(operation.finish())
    run(shell, "%load_ext tiny_agent_nb", capsys)
    run(shell, f"%agent session {path}", capsys)
    out = run(shell, "%agent usage", capsys)
    rows = [line.split() for line in out.splitlines()]
    assert ["1", "run", "completed", "107", "13", "0", "0", "$0.75"] in [r[:8] for r in rows]
    assert ["total", "107", "13", "0", "0", "$0.75"] in rows


def test_loading_a_session_offers_resume_by_the_planners_rule_past_a_compaction(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report of an opened session offers `%agent resume` exactly when the planner
    would resume a run: a compaction after the interrupted run does not hide it."""
    path = tmp_path / "interrupted-then-compacted.agent.jsonl"
    init = HeaderInit(cwd=str(tmp_path), provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        interrupted = Run(environment="/w")
        store.commit(interrupted.start("long job"))
        store.commit(interrupted.finish("interrupted"))
        compaction = new_id()
        store.commit([f.compaction_started(compaction)])
        store.commit(
            [
                f.NewFact(
                    f.OperationFinished(
                        operationId=compaction, outcome="failed", detail="nothing to compact"
                    )
                )
            ]
        )
    run(shell, "%load_ext tiny_agent_nb", capsys)
    out = run(shell, f"%agent session {path}", capsys)
    assert "`%agent resume` continues the interrupted run." in out


def test_the_recovery_report_says_which_calls_may_have_left_processes_running(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead kernel's `python` call: what its code started is the kernel's own child,
    and the kernel's sweeper finds it only by its environment, so the product cannot be
    sure it ended. A `bash` call's processes ended with the kernel where the guard adopts
    what leaves the command's group (Linux); elsewhere they may still run too."""
    path = tmp_path / "died-in-tools.agent.jsonl"
    init = HeaderInit(cwd=str(tmp_path), provider="p", model="m", environment_identity="/w")
    python = ToolIdentity(name="python", version="1", source="builtin")
    with SessionStore.open(path, create=init) as store:
        first = Run(environment="/w")
        store.commit(first.start("start a server"))
        store.commit(first.attempt())
        store.commit(first.answer(None, [("c1", "python", {"code": "start()"})]))
        store.commit([first.intent("c1", python, {"code": "start()"})])
    run(shell, "%load_ext tiny_agent_nb", capsys)
    out = run(shell, f"%agent session {path}", capsys)
    assert (
        '⚠ python code="start()" interrupted — it may have run; it was not run again. '
        "A process it started may still be running.\n"
    ) in out

    path = tmp_path / "died-in-bash.agent.jsonl"
    with SessionStore.open(path, create=init) as store:
        second = Run(environment="/w")
        store.commit(second.start("run a command"))
        store.commit(second.attempt())
        store.commit(second.answer(None, [("c2", "bash", {"command": "serve"})]))
        store.commit([second.intent("c2", BASH, {"command": "serve", "timeout": 120.0})])
    out = run(shell, f"%agent session {path}", capsys)
    line = next(line for line in out.splitlines() if "⚠ bash" in line)
    assert line.endswith("it was not run again." if ADOPTS else "may still be running.")


def _deploy_cut_off(path: Path, *, resumed: bool) -> None:
    """A run whose bash call a crash cut off (answered `interrupted`), and its resume."""
    init = HeaderInit(cwd=str(path.parent), provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        first = Run(environment="/w")
        store.commit(first.start("deploy"))
        store.commit(first.attempt())
        store.commit(first.answer(None, [("c1", "bash", {"command": "./deploy"})]))
        intent = first.intent("c1", BASH, {"command": "./deploy"})
        store.commit([intent, Run.result(intent, "?", "interrupted")])
        store.commit(first.finish("interrupted"))
        if resumed:
            resume = Run(environment="/w")
            store.commit([f.resume_started(resume.operation_id, first.operation_id)])
            store.commit(resume.attempt())
            store.commit(resume.answer("It may have deployed: check the server."))
            store.commit(resume.finish())


def test_status_lists_the_calls_the_latest_run_left_interrupted_not_a_resumed_runs(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A call cut off in a run that was since resumed is history: the resume settled it.
    `%agent status` lists under the latest run only what that run (or the run a resume
    would continue) left interrupted."""
    stopped, resumed = tmp_path / "stopped.agent.jsonl", tmp_path / "resumed.agent.jsonl"
    _deploy_cut_off(stopped, resumed=False)
    _deploy_cut_off(resumed, resumed=True)
    run(shell, "%load_ext tiny_agent_nb", capsys)
    run(shell, f"%agent session {stopped}", capsys)
    status = run(shell, "%agent status", capsys)
    assert "latest   run interrupted" in status
    assert (
        '  ⚠ bash command="./deploy" interrupted — it may have run; it was not run again\n'
    ) in status
    run(shell, f"%agent session {resumed}", capsys)
    status = run(shell, "%agent status", capsys)
    assert "latest   resume completed" in status
    assert "⚠" not in status and "./deploy" not in status, status
