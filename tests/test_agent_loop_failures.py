"""The agent loop when something breaks, against a real OpenAI-compatible server on
loopback: a run never stays open (a provider's bug, a display failing, a resume hitting a
bug), and a replay after a crash that times out or breaks is recorded interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_agent_loop import (
    Harness,
    workspace,
)

from tiny_agent_nb.agent import (
    LoopObserver,
    RunResult,
)
from tiny_agent_nb.agent._loop import RECOVERY_REPLAY_BUDGET
from tiny_agent_nb.provider import Completion
from tiny_agent_nb.session import (
    AssistantMessage,
    ToolCall,
    ToolIdentity,
    ToolResultEntry,
    load_session,
)
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.tools import (
    Tool,
    ToolArguments,
    ToolContext,
    ToolOutput,
)

from helpers.openai_server import (
    OpenAIServer,
    text_reply,
    tool_call,
    tool_calls_reply,
)
from helpers.scenario import Run

__all__ = ["workspace"]  # the fixtures, from test_agent_loop


# ---------------------------------------------------------------- a run never stays open


class BrokenProvider:
    """A provider with a bug: its first call raises, or returns what the store refuses."""

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def complete(self, messages: Any, tools: Any, *, on_event: Any = None) -> Completion:
        if self.fault == "raise":
            raise TypeError("'NoneType' object is not subscriptable")
        message = AssistantMessage(
            role="assistant",
            content="half a pair: \ud800",  # no UTF-8 for it: the store refuses the entry
            reasoning=None,
            refusal=None,
            toolCalls=(),
            finishReason="stop",
        )
        return Completion(message=message, usage=None)


def assert_failed_then_usable(
    h: Harness, server: OpenAIServer, result: RunResult, why: str
) -> None:
    assert result.outcome == "failed"
    assert result.detail is not None and why in result.detail
    state = load_session(h.path)
    assert state.open_operation is None
    failed = state.operations[result.operation_id]
    assert (failed.status, failed.detail) == ("failed", result.detail)
    assert all(a.status != "pending" for a in state.attempts.values())
    assert all(i.status != "pending" for i in state.tool_intents.values())
    server.enqueue(text_reply("next cell works"))
    h.model.target = h.provider
    assert h.loop.run("next").outcome == "completed"


@pytest.mark.parametrize(
    ("fault", "why"), [("raise", "TypeError"), ("refused", "cannot be written as JSON text")]
)
def test_a_provider_bug_fails_the_run_with_its_reason_and_the_next_run_works(
    server: OpenAIServer, workspace: Path, fault: str, why: str
) -> None:
    h = Harness(server, workspace, provider=BrokenProvider(fault))
    try:
        result = h.loop.run("hi")
        (attempt,) = load_session(h.path).attempts.values()
        assert attempt.status == "failed" and attempt.error is not None
        assert why in attempt.error.message
        assert_failed_then_usable(h, server, result, why)
    finally:
        h.close()


def test_a_display_failing_while_a_tool_runs_fails_the_run_and_settles_the_intent(
    server: OpenAIServer, workspace: Path
) -> None:
    h = Harness(server, workspace)

    class BrokenDisplay(LoopObserver):
        def on_tool_start(self, call: ToolCall, arguments: Any) -> None:
            raise RuntimeError("the widget's comm is closed")

    h.display.target = BrokenDisplay()
    try:
        server.enqueue(tool_calls_reply(tool_call("b1", "bash", {"command": "echo hi"})))
        result = h.loop.run("go")
        (intent,) = load_session(h.path).tool_intents.values()
        assert intent.status == "interrupted"  # recorded, then the run stopped: unknown
        h.display.target = h.observer
        assert_failed_then_usable(h, server, result, "the widget's comm is closed")
    finally:
        h.close()


def test_a_resume_that_hits_a_bug_fails_and_the_next_run_works(
    server: OpenAIServer, workspace: Path
) -> None:
    h = Harness(server, workspace, provider=BrokenProvider("raise"))
    try:
        run = Run(environment=str(workspace))
        h.store.commit(run.start("go"))
        h.store.commit(run.attempt())  # killed while the request was in flight
        result = h.loop.resume()
        ops = list(load_session(h.path).operations.values())
        assert [(o.kind, o.status) for o in ops] == [("run", "interrupted"), ("resume", "failed")]
        assert_failed_then_usable(h, server, result, "TypeError")
    finally:
        h.close()


# ---------------------------------------------------------------- replays after a crash


class SlowRead(Tool):
    """A read-only tool whose replay behaves as configured (a test double of a read that
    hit its time limit, or of a tool bug)."""

    name = "slow_read"
    description = "Reads slowly."
    replay_policy: ClassVar = "safeRead"

    class Arguments(ToolArguments):
        pass

    def __init__(self, output: Any) -> None:
        self.output = output

    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        if isinstance(self.output, BaseException):
            raise self.output
        return self.output  # type: ignore[no-any-return]


def pending_read(h: Harness, workspace: Path) -> str:
    """A file left by a process killed with a slow_read intent pending; its intent id."""
    run = Run(environment=str(workspace))
    h.store.commit(run.start("go"))
    h.store.commit(run.attempt())
    h.store.commit(run.answer(None, [("s1", "slow_read", {})]))
    identity = ToolIdentity(name="slow_read", version="1", source="builtin")
    intent = run.intent("s1", identity, {}, replay_policy="safeRead")
    h.store.commit([intent])
    assert intent.id is not None
    return intent.id


@pytest.mark.parametrize(
    ("output", "says"),
    [
        (ToolOutput("half of it", is_error=True, timed_out=True), "time limit"),
        (ToolOutput(b"not text"), "failed unexpectedly"),  # type: ignore[arg-type]
        (MemoryError(), "failed unexpectedly"),
    ],
    ids=["timed-out", "unusable-result", "raised"],
)
def test_a_replay_that_times_out_or_breaks_is_recorded_interrupted_not_replayed(
    server: OpenAIServer, workspace: Path, output: ToolOutput, says: str
) -> None:
    h = Harness(server, workspace, extra_tools=(SlowRead(output),))
    try:
        intent_id = pending_read(h, workspace)
        report = h.loop.recover()
        assert report is not None
        assert (report.replayed, [i.id for i in report.interrupted]) == ((), [intent_id])
        state = load_session(h.path)
        intent = state.tool_intents[intent_id]
        assert intent.status == "interrupted"
        result = state.entries[intent.result_entry_id].entry
        assert isinstance(result, ToolResultEntry) and says in result.message.content
        assert next(iter(state.operations.values())).status == "interrupted"
        before = h.path.read_bytes()
        assert h.loop.recover() is None
        assert h.path.read_bytes() == before
    finally:
        h.close()


class ClockedRead(Tool):
    """A read-only tool whose replay takes `seconds` of an injected clock."""

    name = "slow_read"
    description = "Reads slowly."
    replay_policy: ClassVar = "safeRead"

    class Arguments(ToolArguments):
        pass

    def __init__(self, clock: list[float], seconds: float) -> None:
        self.clock, self.seconds, self.runs = clock, seconds, 0

    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.runs += 1
        self.clock[0] += self.seconds
        return ToolOutput("read")


def test_recovery_replays_for_a_bounded_time_in_all_and_settles_the_rest_interrupted(
    server: OpenAIServer, workspace: Path
) -> None:
    """A file left with many pending reads (a crafted one, each read up to its own time
    limit) is recovered in bounded time: past the budget the reads are not run again."""
    now = [0.0]
    tool = ClockedRead(now, seconds=RECOVERY_REPLAY_BUDGET / 3 + 1)
    h = Harness(server, workspace, extra_tools=(tool,), clock=lambda: now[0])
    try:
        run = Run(environment=str(workspace))
        h.store.commit(run.start("go"))
        h.store.commit(run.attempt())
        calls = [(f"s{n}", "slow_read", {}) for n in range(6)]
        h.store.commit(run.answer(None, calls))
        identity = ToolIdentity(name="slow_read", version="1", source="builtin")
        for call_id, _, _ in calls:
            intent = f.tool_started(
                run.operation_id,
                run.attempt_id or "",
                call_id,
                tool=identity,
                arguments={},
                replay_policy="safeRead",
                environment_identity=str(workspace),
            )
            h.store.commit([intent])
        report = h.loop.recover()
        assert report is not None
        assert tool.runs == 3  # 0, 11 and 22 s in: started; at 33 s the budget is spent
        assert (len(report.replayed), len(report.interrupted)) == (3, 3)
        state = load_session(h.path)
        statuses = [i.status for i in state.tool_intents.values()]
        assert statuses == ["replayed"] * 3 + ["interrupted"] * 3
        last = list(state.tool_intents.values())[-1]
        result = state.entries[last.result_entry_id].entry
        assert isinstance(result, ToolResultEntry) and "skipped" in result.message.content
    finally:
        h.close()
