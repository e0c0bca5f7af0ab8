"""A resume keeps the options of the run it continues (docs/spec.md §2.3): its approval,
its tools, its budget and its model, recorded when the run started, never the kernel's
configuration; an option typed to `%agent resume` overrides that one only. In real
kernels, for `%agent resume` typed with stdin off (an ask nobody can answer runs
nothing) and for the Resume button; in an in-process shell, for `%agent compact` after
a stopped run (its model, and its budget, which the compaction spends)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.session import load_session

from helpers.ipython_shell import run, run_clean, shell
from helpers.kernel_helpers import Execution, StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply, usage
from helpers.widget_frontend import Cell, WidgetFrontend

__all__ = ["shell", "start_kernel", "workspace"]  # the fixtures

SESSION = "analysis.agent.jsonl"
ASK_BASH = "%%agent --approve ask --tools bash --budget 0.05\nTouch the files."
KEPT = "asks before changes · tools: bash · budget $0.05 · 25 steps · model test/model"


def _touch(call_id: str, name: str, cost: float) -> dict[str, Any]:
    command = {"command": f"touch {name}"}
    return tool_calls_reply(tool_call(call_id, "bash", command), usage=usage(cost=cost))


def _offered(server: OpenAIServer) -> list[list[str]]:
    """The tools each model request offered, by name."""
    return [[t["function"]["name"] for t in r.body.get("tools", [])] for r in server.requests]


def _started(workspace: Path) -> list[dict[str, Any]]:
    found = []
    for line in (workspace / SESSION).read_text(encoding="utf-8").splitlines()[1:]:
        value = json.loads(line)
        found.extend(value if isinstance(value, list) else [value])
    return [
        f["record"] for f in found if f["kind"] == "record" and f["record"]["type"] == "runStarted"
    ]


def _stopped_at_its_approval(
    start_kernel: StartKernel, server: OpenAIServer
) -> tuple[WidgetFrontend, Cell]:
    """`--approve ask --tools bash --budget 0.05`, interrupted while its first bash call
    waits for Allow; the resume's answers queued: two more bash calls, $0.02 each."""
    ui = WidgetFrontend(start_kernel(shared=True))
    ui.finish(ui.send("%load_ext tiny_agent_nb"))
    server.enqueue(_touch("c1", "first.txt", 0.02))
    stopped = ui.send(ASK_BASH)
    ui.wait_for_button("Allow")
    ui.kernel.interrupt()
    ui.finish(stopped)
    # the $0.06 the second call brings the run to is past its $0.05: never sent
    server.enqueue(_touch("c2", "second.txt", 0.02), _touch("c3", "third.txt", 0.02))
    server.enqueue(text_reply("never sent"))
    return ui, stopped


def clean(run: Execution) -> str:
    assert run.error is None, run.error
    assert "Traceback" not in run.stdout + run.stderr
    return run.stdout


def test_a_typed_resume_asks_offers_and_spends_as_the_run_it_continues(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    ui, stopped = _stopped_at_its_approval(start_kernel, server)
    assert f"↻ `%agent resume` continues this run: {KEPT}" in stopped.text()
    # `%agent resume` typed where nobody can answer (stdin off): asked, so not run
    out = clean(ui.kernel.execute("%agent resume"))
    assert "(no way to ask here: bash was not allowed." in out
    assert "Resume ended: budgetLimit — budget $0.05 reached" in out
    assert "(2 operations) spent $0.06" in out
    assert not (workspace / "first.txt").exists()
    assert not (workspace / "second.txt").exists()
    assert not (workspace / "third.txt").exists()
    assert _offered(server) == [["bash"], ["bash"], ["bash"]]
    run_options, resume_options = (r["options"] for r in _started(workspace))
    assert resume_options == run_options
    assert run_options == {
        "approve": "ask",
        "tools": ["bash"],
        "budget": 0.05,
        "maxSteps": 25,
        "model": "test/model",
    }


def test_the_resume_button_asks_offers_and_spends_as_the_run_it_continues(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    ui, stopped = _stopped_at_its_approval(start_kernel, server)
    ui.click(ui.wait_for_button("Resume"))
    asked = ui.until(
        lambda: ui.buttons("Deny") or (workspace / "second.txt").exists(),
        "the resumed run to ask before its bash call, or to run it",
    )
    assert not (workspace / "second.txt").exists()
    assert isinstance(asked, list)
    ui.click(asked[0])
    ui.until(lambda: "Resume ended: budgetLimit" in stopped.text(), "the budget to stop it")
    assert "(2 operations) spent $0.06" in stopped.text()
    assert not (workspace / "second.txt").exists()
    assert not (workspace / "third.txt").exists()
    assert _offered(server) == [["bash"], ["bash"], ["bash"]]
    assert [r["options"]["approve"] for r in _started(workspace)] == ["ask", "ask"]


def test_an_option_typed_to_resume_overrides_that_option_only(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    ui, _ = _stopped_at_its_approval(start_kernel, server)
    out = clean(ui.kernel.execute("%agent resume --approve auto"))
    assert (workspace / "second.txt").exists()  # not asked
    assert not (workspace / "third.txt").exists()  # still the run's budget
    assert "Resume ended: budgetLimit — budget $0.05 reached" in out
    assert _offered(server) == [["bash"], ["bash"], ["bash"]]
    run_options, resume_options = (r["options"] for r in _started(workspace))
    assert resume_options == {**run_options, "approve": "auto"}


# ---------------------------------------------------------------- %agent compact

BIG = "y" * 8000


def _read(n: int, cost: float) -> dict[str, Any]:
    return tool_calls_reply(
        tool_call(f"r{n}", "read_file", {"path": "big.txt"}), usage=usage(cost=cost)
    )


@pytest.fixture
def loaded(shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """big.txt beside the notebook; a conversation of it is one a compaction can cut."""
    (tmp_path / "big.txt").write_text(BIG)
    run_clean(shell, "%load_ext tiny_agent_nb", capsys)
    run_clean(shell, "%config TinyAgent.keep_tail_tokens = 10", capsys)
    return tmp_path / SESSION


def test_compact_after_a_stopped_run_asks_the_runs_model(
    shell: InteractiveShell, server: OpenAIServer, loaded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.enqueue(_read(1, 0.001), _read(2, 0.001))
    run_clean(shell, "%%agent --model other/model --max-steps 2\nRead big.txt twice", capsys)
    server.enqueue_summaries(text_reply("SUMMARY: big.txt is y's", usage=usage(cost=0.001)))
    run_clean(shell, "%agent compact", capsys)
    assert [r.body["model"] for r in server.requests] == ["other/model"] * 3
    kinds = [(op.kind, op.status) for op in load_session(loaded).operations.values()]
    assert kinds == [("run", "stepLimit"), ("compaction", "completed")]


def test_compact_spends_the_stopped_runs_budget_and_a_resume_counts_it(
    shell: InteractiveShell, server: OpenAIServer, loaded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.enqueue(_read(1, 0.01), _read(2, 0.01))
    run_clean(shell, "%%agent --budget 0.05 --max-steps 2\nRead big.txt twice", capsys)
    server.enqueue_summaries(text_reply("SUMMARY: big.txt is y's", usage=usage(cost=0.03)))
    run_clean(shell, "%agent compact", capsys)
    # $0.05 spent, the compaction's $0.03 with the run's $0.02: the resume asks nothing
    out = run_clean(shell, "%agent resume", capsys)
    assert "Resume ended: budgetLimit — budget $0.05 reached" in out
    assert "this run (3 operations) spent $0.05" in out
    assert len(server.requests) == 3


def test_compact_does_not_start_once_the_stopped_runs_budget_is_reached(
    shell: InteractiveShell, server: OpenAIServer, loaded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.enqueue(_read(1, 0.006), _read(2, 0.006))
    run_clean(shell, "%%agent --budget 0.01\nRead big.txt twice", capsys)
    refused = run(shell, "%agent compact", capsys)
    assert "nothing compacted: budget $0.01 reached: this run spent $0.012" in refused
    assert "`%agent resume --budget USD`" in refused
    assert len(server.requests) == 2
    assert len(load_session(loaded).operations) == 1
