"""The agent loop against a real OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tiny_agent_nb.agent import (
    AgentError,
    AgentLoop,
    ChatProvider,
    LoopConfig,
    LoopObserver,
    RunResult,
)
from tiny_agent_nb.provider import Provider, ProviderConfig, StreamEvent, TextDelta
from tiny_agent_nb.session import (
    HeaderInit,
    SessionStore,
    ToolCall,
    ToolResultEntry,
    load_session,
)
from tiny_agent_nb.tools import (
    NOTEBOOK_TOOLS,
    Tool,
    ToolArguments,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    builtin_registry,
)

from helpers.openai_server import (
    OpenAIServer,
    error_reply,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage,
)
from helpers.scenario import BASH, READ_FILE, Run

KEY = "sk-test-SECRET-0123456789abcdef"


class Interrupting(Tool):
    """A tool whose effect is interrupted by the user (as Ctrl-C in a notebook does)."""

    name = "slow"
    description = "Takes long."
    replay_policy: ClassVar = "never"

    class Arguments(ToolArguments):
        pass

    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        (context.workspace / "slow-started").write_text("1")
        raise KeyboardInterrupt


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "README.md").write_text("# Demo\n")
    return root.resolve()


class Switchable:
    """Delegates to `target`, which a test swaps: a provider's bug fixed, a display that
    breaks (the loop is given this once, as a notebook gives its own)."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


class Harness:
    def __init__(
        self,
        server: OpenAIServer,
        workspace: Path,
        *,
        provider: ChatProvider | None = None,
        secrets: tuple[str, ...] = (),
        extra_tools: tuple[Tool, ...] = (),
        **config: Any,
    ) -> None:
        self.path = workspace.parent / "nb.agent.jsonl"
        self.sleeps: list[float] = []
        self.events: list[StreamEvent] = []
        self.tool_ends: list[ToolOutput] = []  # what the screen was given
        self.notices: list[str] = []
        self.compactions: list[Any] = []  # what on_compaction was told
        provider_config = ProviderConfig(model="test/model", base_url=server.base_url, api_key=KEY)
        self.provider = Provider(provider_config)
        self.store = SessionStore.open(
            self.path,
            create=HeaderInit(
                cwd=str(workspace),
                provider="openrouter",
                model="test/model",
                environment_identity=str(workspace),
            ),
        )
        # Not the notebook's tools, which a run with no notebook is not offered: the window
        # figures of the tests built on this harness count the tokens of every schema sent.
        everything = builtin_registry()
        tools = everything.subset(n for n in everything.names if n not in NOTEBOOK_TOOLS)
        if config.pop("interrupting", False):
            extra_tools = (*extra_tools, Interrupting())
        if extra_tools:
            tools = ToolRegistry([*(tools.get(n) for n in tools.names), *extra_tools])  # type: ignore[misc]
        harness = self
        ask = config.pop("ask", None)
        clock = config.pop("clock", time.monotonic)
        config.setdefault("approval", "auto")  # the tests not about approval: no one asks

        class Observer(LoopObserver):
            def on_stream(self, event: StreamEvent) -> None:
                harness.events.append(event)

            def on_tool_end(self, call: ToolCall, output: ToolOutput, outcome: str) -> None:
                harness.tool_ends.append(output)

            def on_notice(self, text: str) -> None:
                harness.notices.append(text)

            def on_compaction(self, compacted: Any) -> None:
                harness.compactions.append(compacted)

        self.observer = Observer()
        self.model = Switchable(provider or self.provider)
        self.display = Switchable(self.observer)
        self.loop = AgentLoop(
            self.store,
            self.model,
            tools,
            ToolContext(workspace=workspace, namespace={}, secrets=secrets),
            LoopConfig(provider_config, **config),
            ask=ask,
            observer=self.display,
            sleep=self.sleeps.append,
            clock=clock,
        )

    def close(self) -> None:
        self.loop.close()
        self.store.close()
        self.provider.close()

    def run_once(self, prompt: str) -> RunResult:
        """One run of the loop, then the harness closed (also when the run raises)."""
        try:
            return self.loop.run(prompt)
        finally:
            self.close()


@pytest.fixture
def harness(server: OpenAIServer, workspace: Path) -> Iterator[Harness]:
    h = Harness(server, workspace)
    yield h
    h.close()


def _messages(server: OpenAIServer, index: int) -> list[dict[str, Any]]:
    return server.requests[index].body["messages"]  # type: ignore[no-any-return]


def test_text_answer_completes_and_streams(server: OpenAIServer, harness: Harness) -> None:
    server.enqueue(text_reply("Hello there", usage=usage(20, 3, cost=0.0005)))
    result = harness.loop.run("Say hello")
    assert (result.outcome, result.text) == ("completed", "Hello there")
    assert "".join(e.text for e in harness.events if isinstance(e, TextDelta)) == "Hello there"
    summary = load_session(harness.path).summary()
    assert [o["status"] for o in summary["operations"]] == ["completed"]
    assert [a["status"] for a in summary["attempts"]] == ["settled"]
    assert summary["usage"]["cost"] == 0.0005
    sent = _messages(server, 0)
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[1]["content"] == "Say hello"


def test_tool_calls_run_in_order_and_every_call_is_answered(
    server: OpenAIServer, harness: Harness, workspace: Path
) -> None:
    server.enqueue(
        tool_calls_reply(
            tool_call("r1", "read_file", {"path": "README.md"}),
            tool_call("b1", "bash", {"command": "echo ran >> marker.txt"}),
        ),
        text_reply("Read it and ran it."),
    )
    result = harness.loop.run("Read the readme, then append to the marker")
    assert result.outcome == "completed"
    assert (workspace / "marker.txt").read_text() == "ran\n"
    state = load_session(harness.path)
    assert [(i.tool.name, i.status) for i in state.tool_intents.values()] == [
        ("read_file", "completed"),
        ("bash", "completed"),
    ]
    second = _messages(server, 1)
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool"]
    assert second[2]["content"] == ""  # never null beside tool calls
    assert "# Demo" in second[3]["content"]
    assert all(r.status == 200 for r in server.requests)


def test_rate_limit_is_retried_as_a_new_attempt_honouring_retry_after(
    server: OpenAIServer, harness: Harness
) -> None:
    server.enqueue(error_reply(429, "slow down", headers={"Retry-After": "7"}), text_reply("ok"))
    assert harness.loop.run("hi").outcome == "completed"
    assert harness.sleeps == [7.0]
    attempts = list(load_session(harness.path).attempts.values())
    assert [(a.attempt, a.status) for a in attempts] == [(1, "failed"), (2, "settled")]
    assert attempts[0].error is not None and attempts[0].error.status == 429
    assert attempts[0].retryable is True
    assert len(server.requests) == 2


def test_bad_key_fails_the_operation_with_advice_and_no_retry(
    server: OpenAIServer, harness: Harness
) -> None:
    server.enqueue(error_reply(401, "No auth credentials found"))
    result = harness.loop.run("hi")
    assert result.outcome == "failed"
    assert result.detail is not None and "API_KEY" in result.detail
    assert KEY not in result.detail
    state = load_session(harness.path)
    (attempt,) = state.attempts.values()
    assert attempt.status == "failed" and attempt.retryable is False
    assert len(server.requests) == 1 and harness.sleeps == []


def test_two_tool_calls_with_the_same_id_are_a_protocol_error_and_none_runs(
    server: OpenAIServer, harness: Harness, workspace: Path
) -> None:
    """Each result names its call by id: two calls sharing one cannot both be answered,
    and guessing which is which could run an effect twice. The attempt fails as a
    protocol error (not retried: the same server says it again), the run says why."""
    server.enqueue(
        tool_calls_reply(
            tool_call("same", "write_file", {"path": "a.txt", "content": "a"}),
            tool_call("same", "write_file", {"path": "b.txt", "content": "b"}),
        )
    )
    result = harness.loop.run("write two files")
    assert result.outcome == "failed"
    assert result.detail is not None and "two of its tool calls the same id" in result.detail
    assert "unexpected error" not in result.detail
    state = load_session(harness.path)
    (attempt,) = state.attempts.values()
    assert attempt.status == "failed" and attempt.error is not None
    assert (attempt.error.kind, attempt.retryable) == ("protocol", False)
    assert not state.tool_intents and not (workspace / "a.txt").exists()
    assert len(server.requests) == 1
    server.enqueue(text_reply("next run works"))
    assert harness.loop.run("next").outcome == "completed"


def test_malformed_and_unknown_tool_calls_become_error_results(
    server: OpenAIServer, harness: Harness, workspace: Path
) -> None:
    server.enqueue(
        tool_calls_reply(
            tool_call("m1", "write_file", '{"path": "x.txt", "content": '),
            tool_call("u1", "launch_rockets", {}),
            tool_call("a1", "write_file", {"path": "x.txt"}),
        ),
        text_reply("Sorry."),
    )
    assert harness.loop.run("write").outcome == "completed"
    assert not (workspace / "x.txt").exists()
    state = load_session(harness.path)
    assert [i.status for i in state.tool_intents.values()] == ["error", "error", "error"]
    tool_messages = [m for m in _messages(server, 1) if m["role"] == "tool"]
    assert "not a JSON object" in tool_messages[0]["content"]
    assert "Unknown tool 'launch_rockets'" in tool_messages[1]["content"]
    assert "content" in tool_messages[2]["content"]  # the missing argument is named
    # intent and error result were committed together: no line ends with a lone intent
    lines = harness.path.read_text().splitlines()
    assert not any('"toolStarted"' in line and not line.startswith("[") for line in lines)


def test_step_limit(server: OpenAIServer, workspace: Path) -> None:
    h = Harness(server, workspace, max_steps=2)
    try:
        server.enqueue(
            tool_calls_reply(tool_call("c1", "list_files", {})),
            tool_calls_reply(tool_call("c2", "list_files", {})),
        )
        result = h.loop.run("loop forever")
        assert result.outcome == "stepLimit"
        assert len(server.requests) == 2
        assert load_session(h.path).summary()["operations"][0]["status"] == "stepLimit"
    finally:
        h.close()


@pytest.mark.parametrize(
    ("approval", "answer", "outcome"),
    [("deny", None, "denied"), ("ask", False, "denied"), ("ask", True, "completed")],
)
def test_approval_policy_for_never_tools(
    server: OpenAIServer, workspace: Path, approval: str, answer: bool | None, outcome: str
) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def ask(name: str, arguments: Any) -> bool:
        asked.append((name, dict(arguments)))
        return bool(answer)

    h = Harness(server, workspace, approval=approval, ask=ask)
    try:
        server.enqueue(
            tool_calls_reply(
                tool_call("r1", "read_file", {"path": "README.md"}),
                tool_call("b1", "bash", {"command": "echo x >> marker.txt"}),
            ),
            text_reply("done"),
        )
        h.loop.run("go")
        statuses = [i.status for i in load_session(h.path).tool_intents.values()]
        assert statuses == ["completed", outcome]  # safeRead tools never ask
        assert (workspace / "marker.txt").exists() == (outcome == "completed")
        assert [n for n, _ in asked] == ([] if approval == "deny" else ["bash"])
    finally:
        h.close()


def test_missing_usage_is_unknown_not_zero(server: OpenAIServer, harness: Harness) -> None:
    server.enqueue(text_reply("no usage from this server", usage=None))
    harness.loop.run("hi")
    state = load_session(harness.path)
    assert state.usage == {}
    assert state.summary()["usage"]["cost"] == 0  # empty ledger: nothing was reported
    assert not any(f.kind == "usage" for f in state.facts)


def test_interrupt_during_the_stream_records_the_abort(
    server: OpenAIServer, workspace: Path
) -> None:
    h = Harness(server, workspace)

    class Stop(LoopObserver):
        def on_stream(self, event: StreamEvent) -> None:
            raise KeyboardInterrupt

    h.display.target = Stop()  # the notebook's display hook is where Ctrl-C lands
    try:
        server.enqueue(text_reply("a long answer that is cut short"))
        with pytest.raises(KeyboardInterrupt):
            h.loop.run("talk")
        state = load_session(h.path)
        (op,) = state.operations.values()
        (attempt,) = state.attempts.values()
        assert op.status == "aborted"
        assert attempt.status == "failed" and attempt.error is not None
        assert attempt.error.kind == "aborted"
        assert any(f.kind == "record" and f.record.type == "abortRequested" for f in state.facts)
    finally:
        h.close()


def test_an_interrupt_as_a_call_is_about_to_start_leaves_no_intent(
    server: OpenAIServer, workspace: Path
) -> None:
    """`on_tool_ready` is the last moment before the call is committed as started (where
    a notebook reads a Stop click sent to its main shell): stopped there, the call never
    exists, and the run is aborted as at any other moment."""
    h = Harness(server, workspace)

    class Stop(LoopObserver):
        def on_tool_ready(self, call: ToolCall) -> None:
            raise KeyboardInterrupt

    h.display.target = Stop()
    try:
        server.enqueue(tool_calls_reply(tool_call("b1", "bash", {"command": "touch ran"})))
        with pytest.raises(KeyboardInterrupt):
            h.loop.run("touch it")
        state = load_session(h.path)
        (op,) = state.operations.values()
        assert op.status == "aborted"
        assert state.tool_intents == {}
        assert not (workspace / "ran").exists()
    finally:
        h.close()


def test_interrupt_during_a_tool_then_resume(server: OpenAIServer, workspace: Path) -> None:
    h = Harness(server, workspace, interrupting=True)
    try:
        server.enqueue(
            tool_calls_reply(
                tool_call("s1", "slow", {}), tool_call("b1", "bash", {"command": "echo no"})
            )
        )
        with pytest.raises(KeyboardInterrupt):
            h.loop.run("do the slow thing")
        state = load_session(h.path)
        first = next(iter(state.operations.values()))
        assert first.status == "aborted"
        assert [i.status for i in state.tool_intents.values()] == [
            "interrupted"
        ]  # b1 never started

        server.enqueue(text_reply("Resumed and finished."))
        result = h.loop.resume()
        assert result.outcome == "completed"
        ops = list(load_session(h.path).operations.values())
        assert [(o.kind, o.status) for o in ops] == [("run", "aborted"), ("resume", "completed")]
        assert ops[1].resumes_operation_id == first.id
        sent = _messages(server, 1)
        tools = [m for m in sent if m["role"] == "tool"]
        assert [t["tool_call_id"] for t in tools] == ["s1", "b1"]
        assert "Not run" in tools[1]["content"]  # never started: answered, and said so
        assert server.requests[1].status == 200  # the server accepted the conversation
        with pytest.raises(AgentError, match="nothing to resume"):
            h.loop.resume()
    finally:
        h.close()


def test_recovery_replays_a_read_and_interrupts_a_bash(
    server: OpenAIServer, workspace: Path
) -> None:
    """A file left by a process killed with a read and a bash intent both pending."""
    h = Harness(server, workspace)
    try:
        run = Run(environment=str(workspace))
        h.store.commit(run.start("go"))
        h.store.commit(run.attempt())
        calls = [("r1", "read_file", {"path": "README.md"}), ("b1", "bash", {"command": "x"})]
        h.store.commit(run.answer(None, calls))
        read = run.intent("r1", READ_FILE, {"path": "README.md"})
        bash = run.intent("b1", BASH, {"command": "x"})
        h.store.commit([read])
        h.store.commit([bash])
        report = h.loop.recover()
        assert report is not None
        assert [i.tool_call_id for i in report.replayed] == ["r1"]
        assert [i.tool_call_id for i in report.interrupted] == ["b1"]
        state = load_session(h.path)
        assert [i.status for i in state.tool_intents.values()] == ["replayed", "interrupted"]
        assert read.id is not None
        result = state.entries[state.tool_intents[read.id].result_entry_id].entry
        assert isinstance(result, ToolResultEntry)
        assert "# Demo" in result.message.content
        assert next(iter(state.operations.values())).status == "interrupted"
        before = h.path.read_bytes()
        assert h.loop.recover() is None
        assert h.path.read_bytes() == before  # a second recovery changes nothing
    finally:
        h.close()


def test_api_key_never_reaches_the_session_file(server: OpenAIServer, harness: Harness) -> None:
    server.enqueue(
        error_reply(401, "bad key"),
    )
    harness.loop.run("one")
    server.enqueue(text_reply("fine"))
    harness.loop.run("two")
    raw = harness.path.read_text()
    assert KEY not in raw and KEY[-12:] not in raw
    assert KEY not in harness.loop.configuration_digest
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(harness.provider) and KEY not in json.dumps(
        load_session(harness.path).summary()
    )


def test_resume_after_the_final_answer_was_saved_does_not_ask_again(
    server: OpenAIServer, workspace: Path
) -> None:
    """Killed between the final assistant entry and operationFinished."""
    h = Harness(server, workspace)
    try:
        run = Run(environment=str(workspace))
        h.store.commit(run.start("what is 2+2"))
        h.store.commit(run.attempt())
        h.store.commit(run.answer("4"))
        result = h.loop.resume()
        assert (result.outcome, result.text) == ("completed", "4")
        assert server.requests == []
        ops = list(load_session(h.path).operations.values())
        assert [(o.kind, o.status) for o in ops] == [
            ("run", "interrupted"),
            ("resume", "completed"),
        ]
    finally:
        h.close()
