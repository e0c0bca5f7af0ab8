"""The context window a run learns, against loopback servers that behave as real ones do
past their window: a 400 that states it (OpenAI, vLLM, llama.cpp), a streamed 200 with
no event (llama-cpp-python), a prompt cut without a word (Ollama); and compaction that
always makes room, with a summary that speaks as the assistant."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_agent_loop import Harness, workspace

from tiny_agent_nb.agent import AgentError, compaction_line
from tiny_agent_nb.agent._turns import NO_ANSWER, SUMMARY_LEAD
from tiny_agent_nb.agent._window import Measure, RunWindow, truncated
from tiny_agent_nb.session import CompactionEntry, SessionState, SessionStore, load_session
from tiny_agent_nb.session import facts as f

from helpers.openai_server import (
    OpenAIServer,
    Reply,
    error_reply,
    is_summarization,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage,
    validate_turns,
)

__all__ = ["workspace"]  # the fixture, shared with test_agent_loop

NOTES = "Meeting notes, line {n}: the parser keeps failing on nested quotes.\n"


def scripted_model(body: Any) -> Reply:
    """A model that reads notes.txt for each prompt, then answers; summarizes when asked."""
    if is_summarization(body):
        return text_reply("SUMMARY: notes.txt was read for every cell; the parser fails.")
    last = body["messages"][-1]
    turn = sum(m["role"] == "user" for m in body["messages"])
    if last["role"] == "tool":
        return text_reply(f"Answer {turn}: the notes say the parser fails on quotes.")
    return tool_calls_reply(tool_call(f"read{turn}", "read_file", {"path": "notes.txt"}))


@pytest.fixture
def notes(workspace: Path) -> Path:
    (workspace / "notes.txt").write_text("".join(NOTES.format(n=n) for n in range(30)))
    return workspace


def window_server(**options: Any) -> OpenAIServer:
    server = OpenAIServer(token_bytes=3.5, turns="alternating", **options)
    server.responder = scripted_model
    return server


@pytest.fixture
def refusing() -> Iterator[OpenAIServer]:
    with window_server(context_limit=4000) as server:
        yield server


def harness(server: OpenAIServer, notes: Path, **config: Any) -> Harness:
    return Harness(server, notes, **config)


def cells(h: Harness, count: int, start: int = 0) -> list[str]:
    outcomes = []
    for n in range(start, start + count):
        result = h.loop.run(f"Cell {n}: what do the notes say?")
        outcomes.append(result.outcome)
        assert result.outcome == "completed", result.detail
    return outcomes


def too_long(server: OpenAIServer) -> list[int]:
    return [r.index for r in server.requests if r.outcome == "too-long"]


def windows(path: Path) -> list[tuple[str, int, str]]:
    state = load_session(path)
    return [(model, w.tokens, w.source) for (_, model), w in state.context_windows.items()]


def compactions(state: SessionState) -> list[CompactionEntry]:
    return [e.entry for e in state.entries.values() if isinstance(e.entry, CompactionEntry)]


def test_a_window_stated_only_in_the_400_is_learned_kept_and_not_learned_again(
    refusing: OpenAIServer, notes: Path
) -> None:
    h = harness(refusing, notes)
    try:
        cells(h, 12)
    finally:
        h.close()
    # one request past the window taught it; the run compacted and went on
    assert len(too_long(refusing)) == 1
    assert windows(h.path) == [("test/model", 4000, "refusal")]
    state = load_session(h.path)
    refused = [a for a in state.attempts.values() if a.error and a.error.kind == "contextLength"]
    assert len(refused) == 1 and compactions(state)
    assert any("4000 tokens" in n for n in h.notices)  # said once, as a notice
    # a new process (another loop on the same file) knows it without asking again
    again = harness(refusing, notes)
    try:
        cells(again, 12, start=12)
    finally:
        again.close()
    assert len(too_long(refusing)) == 1
    assert not refusing.invalid_requests


def test_a_configured_window_still_wins_over_the_learned_one(
    refusing: OpenAIServer, notes: Path
) -> None:
    h = harness(refusing, notes)
    try:
        cells(h, 12)
        (window,) = windows(h.path)
    finally:
        h.close()
    configured = harness(refusing, notes, context_window=100_000)
    try:
        assert configured.loop._compactor.window.tokens == 100_000
        assert configured.loop._compactor.window.origin == "configured"
    finally:
        configured.close()
    assert window == ("test/model", 4000, "refusal")


def test_another_model_at_the_same_server_does_not_inherit_the_window(
    refusing: OpenAIServer, notes: Path
) -> None:
    h = harness(refusing, notes)
    try:
        cells(h, 12)
    finally:
        h.close()
    with SessionStore.open(h.path) as store:
        same = RunWindow(store, configured=None, key=(refusing.base_url, "test/model"))
        other = RunWindow(store, configured=None, key=(refusing.base_url, "other/model"))
        elsewhere = RunWindow(
            store, configured=None, key=("http://127.0.0.2:8080/v1", "test/model")
        )
    assert (same.tokens, same.origin) == (4000, "refusal")
    assert (other.tokens, other.origin) == (32_768, "default")
    assert (elsewhere.tokens, elsewhere.origin) == (32_768, "default")


def test_an_empty_stream_is_asked_again_unstreamed_and_its_400_teaches_the_window(
    notes: Path,
) -> None:
    # llama-cpp-python past n_ctx: a streamed request gets 200 and no event at all
    with window_server(context_limit=4000, overflow="empty-stream") as server:
        h = harness(server, notes)
        try:
            cells(h, 12)
        finally:
            h.close()
    empty = [r for r in server.requests if r.status == 200 and r.outcome == "too-long"]
    refused = [r for r in server.requests if r.status == 400]
    assert len(empty) == 1 and len(refused) == 1
    assert refused[0].index == empty[0].index + 1  # asked again at once...
    assert refused[0].body["stream"] is False  # ...without streaming
    assert h.sleeps == []  # not retried blindly after a backoff
    assert windows(h.path) == [("test/model", 4000, "refusal")]
    state = load_session(h.path)
    kinds = [a.error.kind for a in state.attempts.values() if a.error]
    assert kinds == ["protocol", "contextLength"]


def test_a_prompt_the_server_cut_silently_is_said_and_no_window_is_taken_from_it(
    notes: Path,
) -> None:
    """Ollama past num_ctx answers from the end of the prompt and counts only that. A
    count is no evidence of a window (a server that counts only what its cache did not
    hold gives the same ones): the answer is kept, the run says so once, nothing is
    recorded, and every run completes."""
    with window_server(context_limit=4000, overflow="truncate", count_usage=True) as server:
        h = harness(server, notes)
        try:
            cells(h, 12)
        finally:
            h.close()
    cut = [r for r in server.requests if r.problem and r.problem.startswith("truncated")]
    assert cut
    assert windows(h.path) == []
    state = load_session(h.path)
    assert not [a for a in state.attempts.values() if a.error]
    said = [n for n in h.notices if "may have cut the start of the conversation" in n]
    assert 1 <= len(said) <= 12  # once per run at most
    assert "the server counted 4000 input tokens" in said[0]
    assert "32768 tokens, the default" in said[0]


def test_a_server_whose_count_never_changes_teaches_no_window(notes: Path) -> None:
    """A server that reports the same prompt_tokens for every request (900): its count
    looks like a window cut short, request after request. No window is recorded, and
    every run completes."""

    def constant_model(body: Any) -> Reply:
        reply = scripted_model(body)
        reply["usage"] = usage(prompt=900)
        return reply

    with OpenAIServer(turns="alternating") as server:
        server.responder = constant_model
        h = harness(server, notes)
        try:
            cells(h, 8)
        finally:
            h.close()
        sizes = [len(json.dumps(r.body)) for r in server.requests]
    assert max(sizes) > 900 * 16  # past the count many times over: it looks cut
    assert windows(h.path) == []
    state = load_session(h.path)
    assert not [a for a in state.attempts.values() if a.error]
    with SessionStore.open(h.path) as store:
        window = RunWindow(store, configured=None, key=(server.base_url, "test/model"))
    assert (window.tokens, window.origin) == (32_768, "default")


def test_a_server_that_counts_only_what_its_cache_did_not_hold_cuts_nothing(
    notes: Path,
) -> None:
    """Ollama 0.30 reported as a request's input tokens only those its KV cache did not
    hold (ollama/ollama#16414): the counts shrink as the conversation grows. No such
    count may be taken for a cut prompt, which would record it as the window, and fail
    this run and every later one that cannot compact under it."""
    sent_before = [b""]
    counted: list[tuple[int, int]] = []  # (the count reported, the bytes of the request)

    def caching_model(body: Any) -> Reply:
        reply = scripted_model(body)
        sent = json.dumps([body.get("tools"), body["messages"]]).encode()
        cached = len(os.path.commonprefix([sent_before[0], sent]))  # noqa: RUF071 (bytes)
        sent_before[0] = sent
        count = max(1, int((len(sent) - cached) / 3.5))
        counted.append((count, len(sent)))
        reply["usage"] = usage(prompt=count)
        return reply

    with OpenAIServer(turns="alternating") as server:
        server.responder = caching_model
        h = harness(server, notes)
        try:
            cells(h, 8)
        finally:
            h.close()
    assert windows(h.path) == []
    state = load_session(h.path)
    assert not [a for a in state.attempts.values() if a.error]
    # counts the rule for a cut prompt alone would take for one: plausible windows,
    # under a token per 16 bytes sent
    assert [c for c, size in counted if c >= 256 and c * 16 < size]


def test_the_summary_is_the_assistants_note_after_a_lead_of_ours(
    refusing: OpenAIServer, notes: Path
) -> None:
    h = harness(refusing, notes)
    try:
        cells(h, 12)
    finally:
        h.close()
    after = [
        r
        for r in refusing.requests
        if any(m["content"] == SUMMARY_LEAD for m in r.body["messages"])
    ]
    assert after
    for request in after:
        messages = request.body["messages"]
        lead = [m["content"] for m in messages].index(SUMMARY_LEAD)
        assert messages[lead]["role"] == "user"
        assert messages[lead + 1]["role"] == "assistant"
        assert messages[lead + 1]["content"].startswith("[Summary of the earlier conversation]")
        assert not any(
            m["role"] == "user" and "SUMMARY:" in m["content"] for m in messages
        )  # never in the user's voice
    assert not refusing.invalid_requests  # every request passed a strict template's turns


def test_the_strict_turns_refuse_what_the_summary_as_a_user_message_sent() -> None:
    system = {"role": "system", "content": "s"}
    before = [system, {"role": "user", "content": "[Summary] x"}, {"role": "user", "content": "q"}]
    assert validate_turns(before) is not None
    assert validate_turns([system, {"role": "assistant", "content": "x"}]) is not None
    assert validate_turns([system, {"role": "user", "content": "q"}, system]) is not None
    calls = {"role": "assistant", "content": "", "tool_calls": []}
    fine = [system, {"role": "user", "content": "q"}, calls, {"role": "tool", "content": "r"}]
    assert validate_turns([*fine, {"role": "assistant", "content": "a"}]) is None


def test_a_prompt_after_a_run_that_got_no_answer_is_no_second_user_turn(notes: Path) -> None:
    """A run that ends before the model answers (here a 400) leaves its prompt unanswered:
    the next prompt must not make two user turns in a row, which a strict chat template
    refuses for every later request of the session."""
    with window_server() as server:
        server.enqueue(error_reply(400, "the model is loading"))
        h = harness(server, notes)
        try:
            assert h.loop.run("Cell 0: what do the notes say?").outcome == "failed"
            cells(h, 2, start=1)
        finally:
            h.close()
        again = harness(server, notes)  # a new process rebuilds the same context
        try:
            cells(again, 1, start=3)
        finally:
            again.close()
        assert not server.invalid_requests, [r.problem for r in server.invalid_requests]
        sent = server.requests[1].body["messages"]
        assert [m["role"] for m in sent[1:4]] == ["user", "assistant", "user"]
        assert sent[2]["content"] == NO_ANSWER
        rebuilt = server.requests[-2].body["messages"]  # the new process's first request
        assert rebuilt[: len(sent)] == sent


def test_a_summary_that_leaves_no_room_fails_its_attempt_and_is_not_kept(
    notes: Path,
) -> None:
    with window_server() as server:
        h = harness(server, notes, context_window=4000, keep_tail_tokens=500)
        server.enqueue_summaries(text_reply("SUMMARY " + "blah " * 4000))  # ~5,000 tokens
        try:
            # Cells complete until the context passes the threshold (when depends on the
            # size of the tool schemas: no fixed count), and its compaction is refused.
            result = h.loop.run("Cell 0: what do the notes say?")
            while result.outcome == "completed" and len(server.requests) < 60:
                result = h.loop.run("Next cell: and now?")
        finally:
            h.close()
    assert result.outcome == "failed"
    assert result.detail is not None and "would leave about" in result.detail
    state = load_session(h.path)
    assert compactions(state) == []  # the context is as it was
    failed = [a for a in state.attempts.values() if a.error and a.error.kind == "protocol"]
    assert len(failed) == 1 and "so it was not kept" in (failed[0].error.message or "")


def test_a_summary_too_large_from_before_is_summarized_again_at_the_same_cut(
    notes: Path,
) -> None:
    with window_server() as server:
        h = harness(server, notes, context_window=8000, keep_tail_tokens=100_000)
        try:
            cells(h, 1)
            last = list(h.store.load().entries)[-1]
            # written before summaries were bounded: larger than the whole window
            h.store.commit(
                [
                    f.NewFact(
                        f.CompactionEntry(summary="OLD " + "detail " * 8000, throughEntryId=last)
                    )
                ]
            )
            compacted = h.loop.compact()
            assert compacted.outcome == "completed", compacted.detail
            (said,) = h.compactions
            assert said.entries == 0  # nothing new: the summary alone, summarized again
            assert "the earlier summary alone (too large)" in compaction_line(said)
            with pytest.raises(AgentError, match="nothing to compact"):
                h.loop.compact()  # the summary is small now
            cells(h, 1, start=1)
        finally:
            h.close()
    state = load_session(h.path)
    old, new = compactions(state)
    assert new.throughEntryId == old.throughEntryId
    sent = server.requests[-2].body["messages"]  # the last cell's first request
    assert "OLD detail" not in str(sent) and "SUMMARY: notes.txt" in str(sent)
    summarizing = [r for r in server.requests if is_summarization(r.body)]
    assert len(str(summarizing[0].body)) < 8000 * 4  # the old summary was sent cut


def test_the_verbatim_tail_is_bounded_by_the_window(notes: Path) -> None:
    # keep_tail_tokens=8000 (the default) can never fit a 4,000-token window
    with window_server(context_limit=4000) as server:
        h = harness(server, notes)
        try:
            cells(h, 12)
        finally:
            h.close()
    assert len(too_long(server)) == 1
    state = load_session(h.path)
    assert compactions(state)
    served = [r.tokens or 0 for r in server.requests if r.outcome == "served"]
    assert max(served) <= 4000


@pytest.mark.parametrize(
    ("sent", "previous", "cut"),
    [
        (Measure(3000, 12_000), Measure(2500, 10_000), False),  # grew as text grows
        (Measure(3000, 12_000), None, False),
        (Measure(4000, 16_000), Measure(4000, 15_000), True),  # the count stopped growing
        (Measure(4000, 15_050), Measure(4000, 15_000), False),  # 50 bytes: too little to judge
        (Measure(1000, 40_000), None, True),  # 40 bytes a token: no tokenizer does that
        (Measure(12, 40_000), Measure(12, 30_000), False),  # a count no window could be
    ],
)
def test_a_cut_prompt_is_told_by_its_count_and_a_growing_one_is_not(
    sent: Measure, previous: Measure | None, cut: bool
) -> None:
    assert truncated(sent, previous) is cut
