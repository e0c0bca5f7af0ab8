"""A run its budget stopped, resumed in real IPython kernels (jupyter_client): in the
same kernel once the budget is raised, then in a new kernel, where the run's budget,
still reached, stops the resume at once and a raised one lets it finish."""

from __future__ import annotations

from pathlib import Path

from tiny_agent_nb.session import load_session

from helpers.kernel_helpers import Execution, StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply, usage

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

SESSION = "analysis.agent.jsonl"


def _read(n: int, cost: float) -> dict[str, object]:
    return tool_calls_reply(
        tool_call(f"r{n}", "read_file", {"path": "notes.txt"}), usage=usage(100, 10, cost=cost)
    )


def clean(run: Execution) -> str:
    """What the cell printed; it raised nothing and wrote nothing to stderr."""
    assert run.error is None, run.error
    assert run.stderr == "", run.stderr
    assert "Traceback" not in run.stdout
    return run.stdout


def test_a_budget_stop_resumes_in_the_same_kernel_and_in_a_new_one(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    (workspace / "notes.txt").write_text("hello\n")
    server.enqueue(
        _read(1, 0.006),  # read
        _read(2, 0.006),  # crosses $0.01: its read does not run
        _read(3, 0.012),  # the resume's answer crosses $0.02: its read does not run
        text_reply("Read the notes twice."),
    )

    first = start_kernel(shared=True)
    clean(first.execute("%load_ext tiny_agent_nb"))
    stopped = clean(first.execute("%%agent --budget 0.01\nRead the notes twice"))
    assert "budget $0.01 reached: this run spent $0.012" in stopped
    # the same kernel: a raised budget lets the run go on, until it is reached again
    resumed = clean(first.execute("%agent resume --budget 0.02"))
    assert "Resume ended: budgetLimit" in resumed
    assert "this run (2 operations) spent $0.024" in resumed
    assert len(server.requests) == 3
    first.shutdown()

    second = start_kernel(shared=True)
    opened = clean(second.execute("%load_ext tiny_agent_nb"))
    assert "`%agent resume` continues the run its budget stopped, given a larger `--budget" in (
        opened
    )
    assert "budget $0.02 · 25 steps" in opened  # what the run keeps: its last resume's
    # the run's budget, not the configuration's: only `--budget` raises it
    clean(second.execute("%config TinyAgent.budget = 1.0"))
    still = clean(second.execute("%agent resume"))
    assert "Resume ended: budgetLimit" in still and "(3 operations) spent $0.024" in still
    assert len(server.requests) == 3  # a budget still reached asks the model nothing
    done = second.execute("%agent resume --budget 1.0")
    assert clean(done) == ""
    assert any("Read the notes twice." in d.get("text/markdown", "") for d in done.displays)
    assert len(server.requests) == 4

    state = load_session(workspace / SESSION)
    assert [(op.kind, op.status) for op in state.operations.values()] == [
        ("run", "budgetLimit"),
        ("resume", "budgetLimit"),
        ("resume", "budgetLimit"),
        ("resume", "completed"),
    ]
    # each resume continued the conversation: the calls the stops left unrun were
    # answered "not run" to the model, and nothing ran twice
    assert [(i.tool_call_id, i.status) for i in state.tool_intents.values()] == [
        ("r1", "completed")
    ]
    results = [m for m in server.requests[3].body["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["r1", "r2", "r3"]
    assert [m["content"].startswith("Not run:") for m in results] == [False, True, True]
