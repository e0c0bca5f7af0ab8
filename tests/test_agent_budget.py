"""The run budget (DESIGN §9) against a loopback server that reports cost."""

from __future__ import annotations

from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import pytest
from test_agent_crash import TIMEOUT_S, Bench
from test_agent_loop import Harness, workspace

from tiny_agent_nb.agent import LoopConfig
from tiny_agent_nb.session import load_session

from openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply, usage

__all__ = ["workspace"]  # the fixture, shared with test_agent_loop


def _read(n: int, cost: float | None, **options: Any) -> dict[str, object]:
    return tool_calls_reply(
        tool_call(f"r{n}", "read_file", {"path": "README.md"}),
        usage=usage(100, 10, cost=cost),
        **options,
    )


def test_budget_stops_at_the_check_after_the_attempt_that_crosses_it(
    server: OpenAIServer, workspace: Path
) -> None:
    server.enqueue(_read(1, 0.004), _read(2, 0.004), _read(3, 0.004), text_reply("never sent"))
    h = Harness(server, workspace, budget=0.01)
    result = h.run_once("Read the readme again and again")
    # 0.008 < 0.01: the third attempt is made; it crosses (0.012), the next check stops
    assert len(server.requests) == 3
    assert result.outcome == "budgetLimit"
    assert result.detail is not None
    assert "budget $0.01 reached: this run spent $0.012" in result.detail
    state = load_session(h.path)
    (op,) = state.operations.values()
    assert (op.status, op.detail) == ("budgetLimit", result.detail)
    # every tool call of the last answer was answered before the run stopped
    assert [i.status for i in state.tool_intents.values()] == ["completed"] * 3
    assert h.notices == []  # every cost was known


def test_budget_reached_exactly_stops_before_the_next_attempt(
    server: OpenAIServer, workspace: Path
) -> None:
    server.enqueue(_read(1, 0.005), _read(2, 0.005), text_reply("never sent"))
    h = Harness(server, workspace, budget=0.01)
    result = h.run_once("Read it twice")
    assert len(server.requests) == 2
    assert result.outcome == "budgetLimit"


def test_no_budget_never_stops_a_run(server: OpenAIServer, workspace: Path) -> None:
    assert LoopConfig(provider="openrouter", model="m").budget is None  # the default
    server.enqueue(_read(1, 5.0), text_reply("done", usage=usage(cost=5.0)))
    h = Harness(server, workspace)
    assert h.run_once("Read it").outcome == "completed"


def test_a_resumed_run_keeps_counting_from_the_file(server: OpenAIServer, workspace: Path) -> None:
    # the first kernel: one priced answer, then Ctrl-C inside its tool
    server.enqueue(tool_calls_reply(tool_call("s1", "slow", {}), usage=usage(100, 10, cost=0.006)))
    first = Harness(server, workspace, budget=0.01, interrupting=True)
    try:
        with pytest.raises(KeyboardInterrupt):
            first.loop.run("Do the slow thing")
    finally:
        first.close()
    # a new store and loop over the same file: the ledger is all it knows
    server.enqueue(_read(2, 0.006), text_reply("never sent"))
    second = Harness(server, workspace, budget=0.01)
    try:
        result = second.loop.resume()
    finally:
        second.close()
    assert len(server.requests) == 2  # 0.006 < 0.01: one more attempt, then 0.012 stops
    assert result.outcome == "budgetLimit"
    assert result.detail is not None
    assert "this run (2 operations) spent $0.012" in result.detail
    statuses = [op.status for op in load_session(second.path).operations.values()]
    assert statuses == ["aborted", "budgetLimit"]


def test_resume_with_the_budget_already_spent_stops_without_a_request(
    server: OpenAIServer, workspace: Path
) -> None:
    server.enqueue(tool_calls_reply(tool_call("s1", "slow", {}), usage=usage(100, 10, cost=0.02)))
    first = Harness(server, workspace, interrupting=True)
    try:
        with pytest.raises(KeyboardInterrupt):
            first.loop.run("Do the slow thing")
    finally:
        first.close()
    second = Harness(server, workspace, budget=0.01)
    try:
        result = second.loop.resume()
    finally:
        second.close()
    assert len(server.requests) == 1
    assert result.outcome == "budgetLimit"


def test_unknown_cost_is_said_once_and_never_taken_as_zero(
    server: OpenAIServer, workspace: Path
) -> None:
    server.enqueue(
        tool_calls_reply(tool_call("r1", "read_file", {"path": "README.md"}), usage=None),
        _read(2, None),  # usage without a cost
        _read(3, 0.002),
        text_reply("done", usage=usage(cost=0.002)),
    )
    h = Harness(server, workspace, budget=0.01)
    result = h.run_once("Read it three times")
    # the budget covers priced usage only (0.004 < 0.01): the run goes on, and says so once
    assert result.outcome == "completed"
    assert len(h.notices) == 1
    assert "cost unknown" in h.notices[0] and "counts only priced usage" in h.notices[0]
    (op,) = load_session(h.path).operations.values()
    assert op.detail == h.notices[0]


def test_unknown_cost_is_not_mentioned_without_a_budget(
    server: OpenAIServer, workspace: Path
) -> None:
    server.enqueue(text_reply("hi", usage=None))
    h = Harness(server, workspace)
    assert h.run_once("hi").outcome == "completed"
    assert h.notices == []
    (op,) = load_session(h.path).operations.values()
    assert op.detail is None


def test_budget_counts_across_a_sigkill_and_a_resume_in_a_new_process(
    forkserver: ForkServerContext, server: OpenAIServer, tmp_path: Path
) -> None:
    bench = Bench(forkserver, server, tmp_path)
    try:
        hold = bench.hold()
        server.enqueue(_read(1, 0.006), _read(2, 0.05, hold=hold))
        child = bench.start("run", "auto", "--budget", "0.01")
        server.wait_for_requests(2, TIMEOUT_S)
        child.kill()  # while its second request is in flight: that one is never priced
        hold.set()
        server.enqueue(_read(3, 0.006), text_reply("never sent"))
        report = bench.start("resume", "auto", "--budget", "0.01").report()
    finally:
        bench.close()
    assert report["recovered"]["failedAttempts"] == 1
    # 0.006 from the killed process, read back from the file: one more request, then stop
    assert len(server.requests) == 3
    assert report["resume"]["outcome"] == "budgetLimit"
    assert "this run (2 operations) spent $0.012" in report["resume"]["detail"]
