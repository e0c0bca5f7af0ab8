"""The run budget (docs/spec.md §4) against a loopback server that reports cost."""

from __future__ import annotations

from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import pytest
from test_agent_crash import TIMEOUT_S, Bench
from test_agent_external_tools import Echo
from test_agent_loop import Harness, workspace

from tiny_agent_nb.agent import LoopConfig
from tiny_agent_nb.provider import ProviderConfig
from tiny_agent_nb.session import load_session
from tiny_agent_nb.tools import ToolUsage

from helpers.openai_server import (
    OpenAIServer,
    error_reply,
    is_summarization,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage,
)

__all__ = ["workspace"]  # the fixture, shared with test_agent_loop

FIXTURES = Path(__file__).resolve().parent.parent / "schemas" / "session" / "fixtures"


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
    # 0.008 < 0.01: the third attempt is made; it crosses (0.012), and the check before
    # its tool call stops the run: nothing more starts once the budget is reached
    assert len(server.requests) == 3
    assert result.outcome == "budgetLimit"
    assert result.detail is not None
    assert "budget $0.01 reached: this run spent $0.012" in result.detail
    assert "1 tool call of the last answer did not run" in result.detail
    state = load_session(h.path)
    (op,) = state.operations.values()
    assert (op.status, op.detail) == ("budgetLimit", result.detail)
    assert [i.tool_call_id for i in state.tool_intents.values()] == ["r1", "r2"]
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
    assert LoopConfig(ProviderConfig("m")).budget is None  # the default
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


@pytest.mark.parametrize("end", ["failed", "aborted"])
def test_unknown_cost_is_kept_in_the_runs_end_however_it_ends(
    server: OpenAIServer, workspace: Path, end: str
) -> None:
    """A run that said its costs were unknown and then ended otherwise than by its answer:
    a request the server refused for good (that end is committed with the failed attempt),
    or a Ctrl-C in a tool. Its end keeps the note, after what ended it."""
    unpriced = tool_calls_reply(tool_call("r1", "read_file", {"path": "README.md"}), usage=None)
    stop = (
        error_reply(400, "the server would not take it")
        if end == "failed"
        else tool_calls_reply(tool_call("s1", "slow", {}))
    )
    server.enqueue(unpriced, stop)
    h = Harness(server, workspace, budget=0.01, interrupting=True)
    try:
        result = h.loop.run("Read it, then go on")
        assert result.outcome == end
    except KeyboardInterrupt:
        assert end == "aborted"
    finally:
        h.close()
    (op,) = load_session(h.path).operations.values()
    (note,) = h.notices
    ended = "the server would not take it" if end == "failed" else "interrupted by the user"
    assert op.status == end and op.detail is not None
    assert ended in op.detail and op.detail.endswith(f"; {note}"), op.detail


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


def _billed_then_broken(n: int, cost: float, how: str) -> dict[str, object]:
    """A streamed answer whose usage (priced) arrives with every chunk, then the stream
    breaks: the connection drops, or the server sends an error chunk (OpenRouter's
    mid-stream failure). The tokens were billed; no answer came."""
    broken: dict[str, Any] = (
        {"drop_after": 4}
        if how == "dropped"
        else {"error_after": {"after": 4, "error": {"code": 502, "message": "upstream died"}}}
    )
    return text_reply(
        f"partial answer {n} that never finishes",
        usage=usage(100, 10, cost=cost),
        usage_every_chunk=True,
        **broken,
    )


@pytest.mark.parametrize("how", ["dropped", "error chunk"])
def test_a_failed_attempt_keeps_its_billed_usage_and_the_budget_stops_the_retries(
    server: OpenAIServer, workspace: Path, how: str
) -> None:
    server.enqueue(*(_billed_then_broken(n, 0.004, how) for n in range(1, 6)))
    h = Harness(server, workspace, budget=0.01)
    result = h.run_once("Answer, please")
    # 0.004 per broken attempt: after the third (0.012) the check before the retry stops
    assert len(server.requests) == 3
    assert result.outcome == "budgetLimit"
    assert result.detail is not None and "this run spent $0.012" in result.detail
    state = load_session(h.path)
    attempts = list(state.attempts.values())
    assert [a.status for a in attempts] == ["failed"] * 3
    assert [state.usage[a.id].cost for a in attempts] == [0.004] * 3
    assert state.totals.known_cost == 0.012
    assert len(h.sleeps) == 2  # backoff before the second and third attempts only


def test_a_failed_attempt_without_a_budget_still_lands_in_the_ledger(
    server: OpenAIServer, workspace: Path
) -> None:
    server.enqueue(
        _billed_then_broken(1, 0.004, "dropped"), text_reply("done", usage=usage(cost=0.001))
    )
    h = Harness(server, workspace)
    assert h.run_once("Answer, please").outcome == "completed"
    state = load_session(h.path)
    failed, settled = state.attempts.values()
    assert (failed.status, settled.status) == ("failed", "settled")
    assert state.usage[failed.id].inputTokens == 100
    assert state.totals.known_cost == 0.005


def test_a_tool_that_reports_its_cost_is_counted_before_the_next_call_of_the_answer(
    server: OpenAIServer, workspace: Path
) -> None:
    # One answer asks for 20 calls of a tool that reports $1 of its own spending each.
    dollar = ToolUsage(input_tokens=10, output_tokens=1, cost=1.0)
    echo = Echo(dollar)
    calls = [tool_call(f"e{n}", "demo__echo", {"text": f"call {n}"}) for n in range(20)]
    server.enqueue(tool_calls_reply(*calls, usage=usage(100, 10, cost=0.001)))
    h = Harness(server, workspace, budget=0.5, extra_tools=(echo,))
    result = h.run_once("Echo twenty times")
    # 0.001 < 0.5: the first call runs and reports $1; the check before the second stops
    assert len(echo.calls) == 1
    assert result.outcome == "budgetLimit"
    assert result.detail is not None
    assert "this run spent $1.001" in result.detail
    assert "19 tool calls of the last answer did not run" in result.detail
    state = load_session(h.path)
    assert [i.tool_call_id for i in state.tool_intents.values()] == ["e0"]
    assert state.totals.known_cost == 1.001
    assert len(server.requests) == 1


def _big_reads(workspace: Path, n: int) -> list[dict[str, object]]:
    """`n` answers that each read a file of ~1500 tokens: the context passes a small
    window's threshold after a few, and the run compacts before its next attempt."""
    (workspace / "big.txt").write_text("x" * 6000)
    return [
        tool_calls_reply(
            tool_call(f"b{i}", "read_file", {"path": "big.txt"}), usage=usage(10, 1, cost=0.0)
        )
        for i in range(1, n + 1)
    ]


def test_a_failed_summarization_keeps_its_billed_usage(
    server: OpenAIServer, workspace: Path
) -> None:
    server.enqueue(*_big_reads(workspace, 3), text_reply("never sent"))
    server.enqueue_summaries(_billed_then_broken(1, 0.003, "error chunk"))
    h = Harness(server, workspace, context_window=4000, keep_tail_tokens=1000)
    result = h.run_once("Read big.txt until you are sure")
    assert result.outcome == "failed"  # the compaction failed: the run says what to do
    state = load_session(h.path)
    (summarizing,) = [a for a in state.attempts.values() if a.status == "failed"]
    assert state.usage[summarizing.id].cost == 0.003
    assert state.totals.known_cost == 0.003


def test_the_budget_is_checked_again_after_a_compaction_before_the_attempt(
    server: OpenAIServer, workspace: Path
) -> None:
    server.enqueue(*_big_reads(workspace, 3), text_reply("never sent"))
    server.enqueue_summaries(text_reply("SUMMARY: read big.txt", usage=usage(900, 40, cost=0.02)))
    h = Harness(server, workspace, budget=0.01, context_window=4000, keep_tail_tokens=1000)
    result = h.run_once("Read big.txt until you are sure")
    # the summary cost $0.02: the step's own attempt is never sent (how many reads come
    # before the compaction depends on the tool schemas' size, not on the budget)
    assert result.outcome == "budgetLimit"
    assert result.detail is not None and "this run spent $0.02" in result.detail
    # nothing was sent after the summarization (which read it came after depends on the
    # size of the tool schemas: not a fixed count)
    assert is_summarization(server.requests[-1].body) and server.pending_replies >= 1
    assert len(h.compactions) == 1


def _stopped_by_budget(server: OpenAIServer, workspace: Path) -> Harness:
    """A run its budget of $0.01 stopped: two reads at $0.006 each, the second's call
    left unrun. The harness is closed; the file is what a new one opens."""
    server.enqueue(_read(1, 0.006), _read(2, 0.006))
    first = Harness(server, workspace, budget=0.01)
    assert first.run_once("Read the readme twice").outcome == "budgetLimit"
    return first


def test_a_run_its_budget_stopped_resumes_once_the_budget_is_raised(
    server: OpenAIServer, workspace: Path
) -> None:
    _stopped_by_budget(server, workspace)
    server.enqueue(text_reply("Read it.", usage=usage(cost=0.001)))
    second = Harness(server, workspace, budget=1.0)
    try:
        result = second.loop.resume()
    finally:
        second.close()
    assert (result.outcome, result.text) == ("completed", "Read it.")
    assert len(server.requests) == 3
    # the call the stop left unrun is answered "not run" in the resumed conversation
    messages = server.requests[2].body["messages"]
    assert messages[-1]["role"] == "tool" and messages[-1]["tool_call_id"] == "r2"
    assert messages[-1]["content"].startswith("Not run:")
    state = load_session(second.path)
    assert [(op.kind, op.status) for op in state.operations.values()] == [
        ("run", "budgetLimit"),
        ("resume", "completed"),
    ]


def test_a_resume_with_the_budget_still_reached_stops_at_once_without_a_request(
    server: OpenAIServer, workspace: Path
) -> None:
    _stopped_by_budget(server, workspace)
    again = Harness(server, workspace, budget=0.012)  # exactly what was spent
    try:
        result = again.loop.resume()
    finally:
        again.close()
    assert result.outcome == "budgetLimit"
    assert result.detail is not None and "this run (2 operations) spent $0.012" in result.detail
    assert len(server.requests) == 2  # the model was not asked
    state = load_session(again.path)
    assert [op.status for op in state.operations.values()] == ["budgetLimit", "budgetLimit"]


def test_a_run_max_steps_stopped_resumes_for_max_steps_more(
    server: OpenAIServer, workspace: Path
) -> None:
    server.enqueue(_read(1, None), _read(2, None), text_reply("Read it twice."))
    first = Harness(server, workspace, max_steps=1)
    assert first.run_once("Read the readme twice").outcome == "stepLimit"
    second = Harness(server, workspace, max_steps=1)
    try:
        assert second.loop.resume().outcome == "stepLimit"  # one more step, one more read
    finally:
        second.close()
    third = Harness(server, workspace, max_steps=5)
    try:
        result = third.loop.resume()
    finally:
        third.close()
    assert (result.outcome, result.text) == ("completed", "Read it twice.")
    statuses = [i.status for i in load_session(third.path).tool_intents.values()]
    assert statuses == ["completed", "completed"]


def test_usage_past_the_bound_in_the_file_is_no_cost_to_the_budget() -> None:
    """The fixture's first two answers report 1e308 each: read as no usage, so a run's
    spend is not `inf` but unknown (an answered attempt without usage)."""
    state = load_session(FIXTURES / "usage-out-of-range.jsonl")
    first, _, third = state.operations
    assert state.spend(first) == (0.0, 1, 1)
    assert state.spend(third) == (2e-05, 0, 1)
