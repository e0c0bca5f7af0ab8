"""The agent loop against a real OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import os
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
from tiny_agent_nb.agent._loop import RECOVERY_REPLAY_BUDGET
from tiny_agent_nb.provider import Completion, Provider, ProviderConfig, StreamEvent, TextDelta
from tiny_agent_nb.session import (
    AssistantMessage,
    HeaderInit,
    SessionStore,
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
        tools = builtin_registry()
        if config.pop("interrupting", False):
            extra_tools = (*extra_tools, Interrupting())
        if extra_tools:
            tools = ToolRegistry([*(tools.get(n) for n in tools.names), *extra_tools])  # type: ignore[misc]
        harness = self
        ask = config.pop("ask", None)
        clock = config.pop("clock", time.monotonic)

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
            LoopConfig(
                provider="openrouter",
                model="test/model",
                provider_digest=provider_config.digest_material(),
                **config,
            ),
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


# ---------------------------------------------------------------- untrusted tool output


def secret_pieces(secret: str, size: int = 8) -> list[str]:
    """Every run of `size` characters of `secret`: none may show anywhere."""
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def test_the_api_key_shown_by_any_tool_is_redacted_in_the_file_the_model_and_the_screen(
    server: OpenAIServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_AGENT_API_KEY", KEY)
    (workspace / ".env").write_text(f"OPENROUTER_API_KEY={KEY}\n")
    # grep shows 400 characters of a line: the key is cut after its first 7.
    (workspace / "bundle.min.js").write_text("k=" + "x" * 391 + KEY + ";\n")
    h = Harness(server, workspace, secrets=(KEY,))
    try:
        server.enqueue(
            tool_calls_reply(
                tool_call("r1", "read_file", {"path": ".env"}),
                tool_call("b1", "bash", {"command": "cat .env; env | grep -c API_KEY"}),
                tool_call("p1", "python", {"code": "import os\nos.environ['TINY_AGENT_API_KEY']"}),
                tool_call("g1", "grep", {"pattern": "k=x", "path": "bundle.min.js"}),
            ),
            text_reply("done"),
        )
        assert h.loop.run("show me the key").outcome == "completed"
        raw = h.path.read_text()
        sent = json.dumps(_messages(server, 1))
        shown = "\n".join(o.content for o in h.tool_ends)
        for piece in secret_pieces(KEY):
            assert piece not in raw and piece not in sent and piece not in shown
        assert shown.count("[redacted]") == 4  # read_file, bash (cat), python and grep
        assert "\n0\n" in shown  # bash's environment held no API_KEY variable at all
        grep_result = h.tool_ends[-1].content
        assert not any(piece in grep_result for piece in secret_pieces(KEY, 4))
    finally:
        h.close()


def test_a_key_the_model_repeats_is_redacted_in_what_is_kept_and_its_tools_get_the_call_as_sent(
    server: OpenAIServer, workspace: Path
) -> None:
    """bash can read the kernel's environment (/proc/$TINY_AGENT_KERNEL_PID/environ);
    once the model has the key, its answer, its reasoning and its calls' arguments are
    redacted before they are committed. The tools get the arguments the model sent (a
    redaction never changes what a tool does), so the file cannot say exactly what ran:
    such an intent is never replayed, even a read's."""
    (workspace / f"notes-{KEY}.txt").write_text("the notes")
    h = Harness(server, workspace, secrets=(KEY,))
    try:
        server.enqueue(
            tool_calls_reply(
                tool_call("w1", "write_file", {"path": "k.txt", "content": f"key={KEY}"}),
                tool_call("b1", "bash", {"command": f"echo {KEY} >> k2.txt"}),
                tool_call("r1", "read_file", {"path": f"notes-{KEY}.txt"}),
                tool_call("r2", "read_file", {"path": "k.txt"}),
                content=f"The key is {KEY}.",
                reasoning=f"I found {KEY} in the environment.",
            ),
            text_reply(f"Saved {KEY} to k.txt."),
        )
        result = h.loop.run("leak it")
        assert result.outcome == "completed" and result.text == "Saved [redacted] to k.txt."
        raw = h.path.read_text()
        assert KEY not in raw and KEY not in json.dumps(_messages(server, 1))
        assert (workspace / "k.txt").read_text() == f"key={KEY}"  # as the model asked
        assert (workspace / "k2.txt").read_text() == f"{KEY}\n"
        state = load_session(h.path)
        intents = {i.tool_call_id: i for i in state.tool_intents.values()}
        assert intents["r1"].arguments["path"] == "notes-[redacted].txt"
        assert intents["r1"].replay_policy == "never"  # its file is not the one it read
        assert intents["r2"].replay_policy == "safeRead"  # nothing of it was redacted
        shown = [o.content for o in h.tool_ends]
        assert shown[2].endswith("\nthe notes") and shown[3].endswith("\nkey=[redacted]")
    finally:
        h.close()


def test_a_prompt_holding_the_key_is_kept_and_sent_redacted(
    server: OpenAIServer, workspace: Path
) -> None:
    """A prompt filled from a variable (an error message, a config) may hold the key: it
    is committed and sent as every other text is, redacted."""
    h = Harness(server, workspace, secrets=(KEY,))
    try:
        server.enqueue(text_reply("I see a redacted key."))
        assert h.loop.run(f"Why does this fail?\nAuthError: bad key {KEY}").outcome == "completed"
        sent = server.requests[0].raw.decode()
        assert "bad key [redacted]" in sent and KEY not in sent
        assert KEY not in h.path.read_text() and "bad key [redacted]" in h.path.read_text()
    finally:
        h.close()


def test_a_lone_surrogate_in_tool_output_is_kept_as_a_replacement_and_the_next_run_works(
    server: OpenAIServer, workspace: Path
) -> None:
    (workspace / os.fsdecode(b"caf\xe9.txt")).write_text("not UTF-8 named")
    h = Harness(server, workspace)
    try:
        server.enqueue(
            tool_calls_reply(
                tool_call("p1", "python", {"code": "print('half a pair: \\ud800')"}),
                tool_call("l1", "list_files", {}),
            ),
            text_reply("listed"),
            text_reply("still here"),
        )
        assert h.loop.run("list").outcome == "completed"
        state = load_session(h.path)
        contents = [
            e.entry.message.content
            for e in state.entries.values()
            if isinstance(e.entry, ToolResultEntry)
        ]
        assert contents[0] == "half a pair: \ufffd"
        assert "caf\ufffd.txt" in contents[1] or "caf\\xe9.txt" in contents[1]
        assert h.loop.run("again").outcome == "completed"
    finally:
        h.close()


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
