"""Compaction (docs/spec.md §3) in the loop, against the loopback server: automatic before an
attempt past the threshold, after a `contextLength` failure, and as `%agent compact`'s
operation; a long scripted session stays bounded."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from test_agent_loop import KEY, Harness, workspace

from tiny_agent_nb.agent import AgentError, ContextFull, build_context
from tiny_agent_nb.provider import (
    Completion,
    Provider,
    ProviderConfig,
    ProviderError,
    StreamEvent,
    messages,
)
from tiny_agent_nb.session import CompactionEntry, load_session
from tiny_agent_nb.tools import ToolSchema

from helpers.openai_server import (
    MODEL,
    OpenAIServer,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage,
)

__all__ = ["workspace"]  # the fixture, shared with test_agent_loop

BIG = "x" * 6000  # ~1500 tokens of file content per read


def _read(n: int) -> dict[str, object]:
    return tool_calls_reply(tool_call(f"r{n}", "read_file", {"path": "big.txt"}))


def _summary(text: str = "SUMMARY: read big.txt several times") -> dict[str, object]:
    return text_reply(text, usage=usage(900, 40, cost=0.001))


def _requests_with(server: OpenAIServer, text: str) -> list[int]:
    return [i for i, r in enumerate(server.requests) if text in r.raw.decode()]


@pytest.fixture
def real_provider(server: OpenAIServer) -> Iterator[Provider]:
    with Provider(ProviderConfig(model=MODEL, base_url=server.base_url)) as provider:
        yield provider


@pytest.fixture
def big_workspace(workspace: Path) -> Path:
    (workspace / "big.txt").write_text(BIG)
    return workspace


def test_a_run_past_the_threshold_compacts_before_its_next_attempt(
    server: OpenAIServer, big_workspace: Path
) -> None:
    server.enqueue(_read(1), _read(2), _read(3), text_reply("done"))
    server.enqueue_summaries(_summary())
    # ~1,300 tokens of tool schemas, then ~1,500 a read: past 0.8 of 7,000 after the third
    h = Harness(
        server, big_workspace, context_window=7000, compact_threshold=0.8, keep_tail_tokens=1000
    )
    result = h.run_once("Read big.txt until you are sure")
    assert result.outcome == "completed"
    state = load_session(h.path)
    compactions = [e for e in state.entries.values() if isinstance(e.entry, CompactionEntry)]
    assert len(compactions) == 1
    body = compactions[0].entry
    assert isinstance(body, CompactionEntry)
    # the compaction settled its own attempt, and the ledger holds its usage
    attempt = state.attempts[body.attemptId or ""]
    assert (attempt.status, attempt.entry_id) == ("settled", compactions[0].id)
    assert state.usage[attempt.id].cost == 0.001
    assert body.tokensBefore is not None and body.tokensBefore >= 3200
    # the summarization request: no tools, the instructions, the user's words
    (summarizing,) = [r for r in server.requests if "tools" not in r.body]
    assert "files read, created or changed" in summarizing.raw.decode()
    assert "Read big.txt until you are sure" in summarizing.raw.decode()
    # the request after it starts from the summary and keeps a verbatim tail
    after = server.requests[-1].body["messages"]
    assert (after[2]["role"], after[1]["role"]) == ("assistant", "user")  # not the user's voice
    assert "SUMMARY: read big.txt several times" in after[2]["content"]
    assert after[-1]["role"] == "tool"
    assert len(server.requests[-1].raw) < len(server.requests[-3].raw)
    (seen,) = h.compactions
    assert seen.entries >= 2 and seen.tokens_after < seen.tokens_before
    assert seen.cost == 0.001


def test_a_run_below_the_threshold_never_compacts(
    server: OpenAIServer, big_workspace: Path
) -> None:
    server.enqueue(_read(1), text_reply("done"))
    server.enqueue_summaries(_summary())
    h = Harness(server, big_workspace, context_window=100_000, keep_tail_tokens=1000)
    assert h.run_once("Read big.txt").outcome == "completed"
    assert len(server.requests) == 2
    assert all("tools" in r.body for r in server.requests)


class TooLong:
    """The real provider, except that a request over `limit` bytes is refused as a
    server refuses one past its context length (the provider's classification of those
    answers is the window change's; the loop relies only on the kind)."""

    def __init__(self, inner: Any, limit: int) -> None:
        self.inner, self.limit, self.refused = inner, limit, 0

    def complete(
        self,
        context: messages.Context,
        tools: Sequence[ToolSchema],
        *,
        on_event: Callable[[StreamEvent], None] | None = None,
    ) -> Completion:
        if len(messages.encode(context)) > self.limit:
            self.refused += 1
            raise ProviderError(
                "This model's maximum context length is 4000 tokens",
                kind="contextLength",
                retryable=False,
                status=400,
            )
        return self.inner.complete(context, tools, on_event=on_event)  # type: ignore[no-any-return]


def test_a_context_length_refusal_compacts_and_retries_as_a_new_attempt(
    server: OpenAIServer, big_workspace: Path, real_provider: Provider
) -> None:
    server.enqueue(_read(1), _read(2), text_reply("done"))
    server.enqueue_summaries(_summary())
    provider = TooLong(real_provider, 9000)
    h = Harness(
        server,
        big_workspace,
        provider=provider,
        context_window=1_000_000,  # the trait is too big: only the server knows
        keep_tail_tokens=100,
    )
    result = h.run_once("Read big.txt twice")
    assert result.outcome == "completed", result.detail
    assert provider.refused == 1
    state = load_session(h.path)
    kinds = [(a.status, a.error.kind if a.error else None) for a in state.attempts.values()]
    assert ("failed", "contextLength") in kinds
    assert sum(isinstance(e.entry, CompactionEntry) for e in state.entries.values()) == 1


def test_still_too_long_after_compacting_fails_stating_why_with_the_window(
    server: OpenAIServer, big_workspace: Path, real_provider: Provider
) -> None:
    server.enqueue(_read(1), _read(2), text_reply("never"))
    server.enqueue_summaries(_summary())
    provider = TooLong(real_provider, 9000)
    # the verbatim tail alone does not fit: the compaction cannot make enough room
    h = Harness(server, big_workspace, provider=provider, keep_tail_tokens=2000)
    result = h.run_once("Read big.txt twice")
    assert result.outcome == "failed"
    assert result.detail is not None
    # The server refused less than the default window: said as its refusal, with figures.
    assert result.detail.startswith("the server refused a request of about ")
    # The engine states the reason; what to do next is the notebook's to say.
    assert isinstance(result.reason, ContextFull) and result.reason.what == "conversation"
    assert result.reason.window == 32768 and result.reason.origin == "default"
    assert "window is 32768 tokens, the default" in result.detail
    assert "%agent" not in result.detail
    state = load_session(h.path)
    (op,) = state.operations.values()
    assert op.status == "failed"


def test_compact_is_an_operation_of_its_own_with_the_users_instructions(
    server: OpenAIServer, big_workspace: Path
) -> None:
    server.enqueue(_read(1), _read(2), text_reply("read it"))
    server.enqueue_summaries(_summary("SUMMARY v1"), _summary("SUMMARY v2"))
    h = Harness(server, big_workspace, keep_tail_tokens=10)
    try:
        assert h.loop.run("Read big.txt twice").outcome == "completed"
        first = h.loop.compact("mention the file's size")
        with pytest.raises(AgentError, match="nothing to compact"):
            h.loop.compact()  # the tail is all that is left after the cut
        server.enqueue(text_reply("ok"))
        assert h.loop.run("Thanks").outcome == "completed"
    finally:
        h.close()
    assert first.outcome == "completed"
    summarizing = [r for r in server.requests if "tools" not in r.body]
    assert len(summarizing) == 1
    assert "mention the file's size" in summarizing[0].raw.decode()
    state = load_session(h.path)
    kinds = [op.kind for op in state.operations.values()]
    assert kinds == ["run", "compaction", "run"]
    last = server.requests[-1].body["messages"]
    assert "SUMMARY v1" in last[2]["content"] and BIG not in json.dumps(last)


def test_compaction_instructions_and_summary_are_kept_and_sent_redacted(
    server: OpenAIServer, big_workspace: Path
) -> None:
    server.enqueue(_read(1), _read(2), text_reply("read it"))
    server.enqueue_summaries(_summary(f"SUMMARY: the key is {KEY}"))
    h = Harness(server, big_workspace, keep_tail_tokens=10, secrets=(KEY,))
    try:
        assert h.loop.run("Read big.txt twice").outcome == "completed"
        assert h.loop.compact(f"keep the key {KEY}").outcome == "completed"
    finally:
        h.close()
    (summarizing,) = [r for r in server.requests if "tools" not in r.body]
    assert "keep the key [redacted]" in summarizing.raw.decode()
    assert KEY not in summarizing.raw.decode()
    entries = load_session(h.path).entries.values()
    (summary,) = [e.entry for e in entries if isinstance(e.entry, CompactionEntry)]
    assert summary.summary == "SUMMARY: the key is [redacted]"
    assert KEY not in h.path.read_text()


@pytest.mark.slow  # 210 turns through several compactions
def test_a_long_session_stays_bounded_through_several_compactions(
    server: OpenAIServer, big_workspace: Path
) -> None:
    turns = 210
    h = Harness(
        server, big_workspace, context_window=8000, compact_threshold=0.8, keep_tail_tokens=2000
    )
    try:
        for turn in range(turns):
            server.enqueue(_read(turn), text_reply(f"answer {turn}"))
            server.enqueue_summaries(_summary(f"SUMMARY after turn {turn}"))
            result = h.loop.run(f"Turn {turn}: read big.txt")
            assert result.outcome == "completed", result.detail
    finally:
        h.close()
    state = load_session(h.path)
    compactions = sum(isinstance(e.entry, CompactionEntry) for e in state.entries.values())
    assert compactions >= 10
    sizes = [len(r.raw) for r in server.requests]
    # without compaction the last request would hold all 210 reads (1.2 MB)
    assert max(sizes) < 8000 * 4
    assert all(r.status == 200 for r in server.requests)


class InterruptSummaries:
    """The real provider, with Ctrl-C landing while a summarization request is out."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def complete(
        self,
        context: messages.Context,
        tools: Sequence[ToolSchema],
        *,
        on_event: Callable[[StreamEvent], None] | None = None,
    ) -> Completion:
        if not tools:
            raise KeyboardInterrupt
        return self.inner.complete(context, tools, on_event=on_event)  # type: ignore[no-any-return]


def test_ctrl_c_during_a_compaction_records_the_abort_and_changes_no_context(
    server: OpenAIServer, big_workspace: Path, real_provider: Provider
) -> None:
    server.enqueue(_read(1), _read(2))
    provider = InterruptSummaries(real_provider)
    h = Harness(
        server,
        big_workspace,
        provider=provider,
        context_window=5000,  # the tool schemas (~1,300 tokens) and two reads pass 0.8 of it
        keep_tail_tokens=1000,
    )
    try:
        with pytest.raises(KeyboardInterrupt):
            h.loop.run("Read big.txt twice")
    finally:
        h.close()
    state = load_session(h.path)
    (op,) = state.operations.values()
    assert op.status == "aborted"
    last = list(state.attempts.values())[-1]
    assert (last.status, last.error and last.error.kind) == ("failed", "aborted")
    assert not any(isinstance(e.entry, CompactionEntry) for e in state.entries.values())
    # the context is every entry, as it was: both reads verbatim
    sent = messages.encode(build_context(state, None)).decode()
    assert sent.count(BIG) == 2


def test_a_second_context_length_refusal_after_compacting_fails_saying_what_to_do(
    server: OpenAIServer, big_workspace: Path, real_provider: Provider
) -> None:
    server.enqueue(_read(1), text_reply("never"))
    server.enqueue_summaries(_summary())
    provider = TooLong(real_provider, 3000)
    # the compaction can only summarize the prompt: the read (6 KB) stays verbatim
    h = Harness(server, big_workspace, provider=provider, keep_tail_tokens=100)
    result = h.run_once("Read big.txt")
    assert (result.outcome, provider.refused) == ("failed", 2)
    assert result.detail is not None
    assert (
        "as too long, though the model's context window is 32768 tokens, the default: the "
        "server states none: compacting under it did not make room" in result.detail
    )
    state = load_session(h.path)
    assert sum(isinstance(e.entry, CompactionEntry) for e in state.entries.values()) == 1
    errors = [a.error.kind for a in state.attempts.values() if a.error]
    assert errors == ["contextLength", "contextLength"]


def test_a_window_the_tools_alone_fill_says_to_offer_fewer_tools_and_asks_no_summary(
    workspace: Path,
) -> None:
    """A server that serves 1500 tokens (llama-server --ctx-size 1536): the schemas of the
    tools every request offers fill most of it, so no summary can make room. The run says
    so, and its reason says what fills the window (the notebook then advises fewer tools,
    not `%agent new`, which fails the same way)."""
    (workspace / "notes.txt").write_text("the parser fails on nested quotes\n" * 30)

    def model(body: Any) -> dict[str, object]:
        if body["messages"][-1]["role"] == "tool":
            return text_reply("It fails on nested quotes.")
        return tool_calls_reply(tool_call("r", "read_file", {"path": "notes.txt"}))

    with OpenAIServer(context_limit=1500, token_bytes=3.5) as server:
        server.responder = model
        h = Harness(server, workspace)
        try:
            results = [h.loop.run(f"Cell {n}: what do the notes say?") for n in range(3)]
        finally:
            h.close()
        summarizations = [r for r in server.requests if "summar" in json.dumps(r.body).lower()]
    for result in results:
        assert result.outcome == "failed"
        assert result.detail is not None
        assert "definitions of the tools offered alone take about" in result.detail
        assert isinstance(result.reason, ContextFull) and result.reason.what == "fixed"
        assert "TinyAgent" not in result.detail and "%agent" not in result.detail
    assert summarizations == []  # none was paid for: it could not have made room
