"""`build_context` against an independent reference of docs/spec.md §3: for every
state a session passes through (after each of its lines), what the model is sent equals
what a reference that encodes each entry as the wire did before the context became
provider-neutral sends.

Sessions: the valid conformance fixtures, and runs built with tests/helpers/scenario.py that go
through retries, aborts with never-started calls, a crash with an interrupted tool,
recovery, resume, a context-length refusal, checkpoints mid-run and a checkpoint that keeps
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import NOT_STARTED, LoopObserver, build_context
from tiny_agent_nb.agent._turns import CONTINUED, NO_ANSWER, SUMMARY_HEADER, SUMMARY_LEAD
from tiny_agent_nb.notebook import NotebookRuntime, TinyAgent, resolve_session_path
from tiny_agent_nb.provider import messages
from tiny_agent_nb.session import (
    AssistantEntry,
    CompactionEntry,
    EntryFact,
    Fact,
    HeaderInit,
    KernelNotice,
    RecordFact,
    SessionState,
    SessionStore,
    StepAttempt,
    ToolResultEntry,
    UserEntry,
)
from tiny_agent_nb.session import facts as f

from helpers.openai_server import OpenAIServer, text_reply
from helpers.scenario import BASH, READ_FILE, Run, complete_run, intent_result

FIXTURES = Path(__file__).resolve().parent.parent / "schemas" / "session" / "fixtures"
VALID = sorted(
    p.name.removesuffix(".expected.json")
    for p in FIXTURES.glob("*.expected.json")
    if "summary" in json.loads(p.read_text())
)


def _at(path: Path) -> Any:  # a SessionLocation (a private name of the notebook)
    """`%agent session PATH`'s location."""
    return resolve_session_path(explicit=str(path), environ={}, user_ns={}, cwd=path.parent)


def _wire(message: dict[str, Any]) -> bytes:
    """A chat-completions message as main (51170d6) encoded it: compact UTF-8 JSON."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def _user(content: str) -> bytes:
    return _wire({"role": "user", "content": content})


def _not_started(call_id: str) -> bytes:
    return _wire({"role": "tool", "tool_call_id": call_id, "content": NOT_STARTED})


_NO_ANSWER = _wire({"role": "assistant", "content": NO_ANSWER})


def _entry_message(entry: EntryFact) -> dict[str, Any]:
    """An entry as main's `wire.entry_message` made it (before the neutral messages)."""
    body = entry.entry
    if isinstance(body, UserEntry):
        cells = body.userCells
        content = f"{cells}\n\n{body.message.content}" if cells else body.message.content
        return {"role": "user", "content": content}
    if isinstance(body, KernelNotice):
        return {"role": "user", "content": body.message.content}
    if isinstance(body, AssistantEntry):
        msg = body.message
        shaped: dict[str, Any] = {"role": "assistant", "content": msg.content or msg.refusal or ""}
        if msg.toolCalls:
            shaped["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": json.dumps(call.arguments, ensure_ascii=False),
                    },
                }
                for call in msg.toolCalls
            ]
        return shaped
    assert isinstance(body, ToolResultEntry)
    return {
        "role": "tool",
        "tool_call_id": body.message.toolCallId,
        "content": body.message.content,
    }


def _reference(state: SessionState, system: str | None) -> list[Any]:
    """The messages a projection kept entry by entry sent (e0f3e51), each encoded as main
    (51170d6) encoded it: at a checkpoint whose cut it still holds, a summary, then the
    kept entries replayed."""
    kept: list[EntryFact] = []
    summary: str | None = None
    cut: str | None = None
    for entry in (state.entries[i] for i in state.entry_path()):  # the path (spec §17)
        body = entry.entry
        if isinstance(body, ToolResultEntry) and _replayed(state, body):
            continue  # a replayed run adds nothing to the conversation (spec §3 item 7)
        if not isinstance(body, CompactionEntry):
            kept.append(entry)
            continue
        ids = [k.id for k in kept]
        if body.throughEntryId in ids or body.throughEntryId == cut:
            kept = (
                kept[ids.index(body.throughEntryId) + 1 :] if body.throughEntryId in ids else kept
            )
            summary, cut = body.summary, body.throughEntryId
    messages: list[bytes] = [_wire({"role": "system", "content": system})] if system else []
    if summary is not None:
        messages += [
            _user(SUMMARY_LEAD),
            _wire({"role": "assistant", "content": f"{SUMMARY_HEADER}\n{summary}"}),
        ]
        if not kept or not isinstance(kept[0].entry, UserEntry | KernelNotice):
            messages.append(_user(CONTINUED))
    unanswered: list[str] = []
    for index, entry in enumerate(kept):
        body = entry.entry
        after = kept[index + 1].entry if index + 1 < len(kept) else None
        if isinstance(body, KernelNotice) and isinstance(after, UserEntry):
            continue  # a run's notice: sent in its prompt's user turn
        if isinstance(body, ToolResultEntry):
            if body.message.toolCallId in unanswered:
                unanswered.remove(body.message.toolCallId)
        else:
            messages += [_not_started(c) for c in unanswered]
            unanswered = []
        message = _entry_message(entry)
        before = kept[index - 1].entry if index else None
        if isinstance(body, UserEntry) and isinstance(before, KernelNotice):
            message["content"] = f"{before.message.content}\n\n{message['content']}"
        if message["role"] == "user" and messages and json.loads(messages[-1])["role"] == "user":
            messages.append(_NO_ANSWER)  # a prompt whose run got no answer (spec §3 item 6)
        messages.append(_wire(message))
        if isinstance(body, AssistantEntry):
            unanswered = [c.id for c in body.message.toolCalls]
    messages += [_not_started(c) for c in unanswered]
    return _plain(b"[" + b",".join(messages) + b"]")


def _plain(encoded: bytes) -> list[Any]:
    """Messages as JSON values, each call's arguments parsed (their spacing is free)."""
    sent: list[Any] = json.loads(encoded)
    for message in sent:
        for call in message.get("tool_calls", ()):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return sent


def _replayed(state: SessionState, body: ToolResultEntry) -> bool:
    intent = state.tool_intents[body.toolStartedId]
    return state.operations[intent.operation_id].kind == "replay"


def _built(state: SessionState, system: str | None) -> list[Any]:
    """What the OpenAI-compatible provider sends of `build_context(state, system)`."""
    return _plain(messages.encode(build_context(state, system)))


def _states(data: bytes) -> list[SessionState]:
    """The session after each of its complete lines (the header's first)."""
    ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    return [SessionStore.in_memory(bytearray(data[:end])).load() for end in ends]


def assert_every_state_sends_the_reference(data: bytes, system: str | None = "be brief") -> int:
    states = _states(data)
    for index, state in enumerate(states):
        assert _built(state, system) == _reference(state, system), f"after line {index}"
    return len(states)


@pytest.mark.parametrize("name", VALID)
def test_the_context_of_a_fixture_is_the_references(name: str) -> None:
    assert_every_state_sends_the_reference((FIXTURES / f"{name}.jsonl").read_bytes())


def _session(build: Callable[[SessionStore], None]) -> bytes:
    buffer = bytearray()
    init = HeaderInit(
        cwd="/w", provider="openrouter", model="test/model", environment_identity="/w"
    )
    store = SessionStore.in_memory(buffer, create=init)
    build(store)
    store.close()
    return bytes(buffer)


def _last_entry(store: SessionStore) -> str:
    return list(store.load().entries)[-1]


def _retry_abort_crash_recover_resume(store: SessionStore) -> None:
    complete_run(store, "first")
    # A retried attempt, then two calls of which one is never started (Ctrl-C).
    run = Run(environment="/w")
    store.commit(run.start("two commands"))
    store.commit(run.attempt())
    assert run.attempt_id is not None
    store.commit(
        [f.attempt_failed(run.attempt_id, kind="http", message="429", retryable=True, status=429)]
    )
    store.commit(run.attempt(2))
    store.commit(
        run.answer(None, [("c1", "bash", {"command": "a"}), ("c2", "bash", {"command": "b"})])
    )
    first = run.intent("c1", BASH, {"command": "a"})
    store.commit([first, Run.result(first, "done")])
    store.commit(
        [
            f.NewFact(f.AbortRequested(operationId=run.operation_id, reason="Ctrl-C")),
            f.NewFact(f.OperationFinished(operationId=run.operation_id, outcome="aborted")),
        ]
    )
    # A crash while a tool ran, with a model request in flight after a read: recovery
    # marks the tool interrupted, then a resume goes on.
    crashed = Run(environment="/w")
    store.commit(crashed.start("bash then read"))
    store.commit(crashed.attempt())
    store.commit(crashed.answer(None, [("c3", "bash", {"command": "rm x"})]))
    lost = crashed.intent("c3", BASH, {"command": "rm x"})
    store.commit([lost])
    pending = store.load().tool_intents[lost.id or ""]
    store.commit(
        [
            intent_result(pending, "interrupted: it may have run", "interrupted"),
            f.NewFact(f.OperationFinished(operationId=crashed.operation_id, outcome="interrupted")),
        ]
    )
    resumed = Run(environment="/w")
    store.commit([f.resume_started(resumed.operation_id, crashed.operation_id)])
    store.commit(resumed.attempt())
    store.commit(resumed.answer("It may have removed x."))
    store.commit(resumed.finish())
    store.commit([f.user_message("a note between runs")])


def _checkpoints_mid_run(store: SessionStore) -> None:
    complete_run(store, "first")
    complete_run(store, "second")
    run = Run(environment="/w")
    store.commit(run.start("read twice"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("r1", "read_file", {"path": "a"})]))
    read = run.intent("r1", READ_FILE, {"path": "a"})
    store.commit([read])
    store.commit([Run.result(read, "A")])
    # A context-length refusal, then a checkpoint settling its own attempt mid-run,
    # keeping this run's messages (the cut is after the second run).
    store.commit(run.attempt())
    assert run.attempt_id is not None
    store.commit(
        [
            f.attempt_failed(
                run.attempt_id, kind="contextLength", message="too long", retryable=False
            )
        ]
    )
    store.commit(run.attempt(2))
    through = list(store.load().entries)[7]  # the second run's final answer
    store.commit(
        [
            f.NewFact(
                f.CompactionEntry(
                    summary="they ran twice",
                    throughEntryId=through,
                    attemptId=run.attempt_id,
                    tokensBefore=9,
                )
            ),
            f.usage(attempt_id=run.attempt_id, input_tokens=50, output_tokens=5),
        ]
    )
    store.commit(run.attempt(3))
    store.commit(run.answer(None, [("r2", "read_file", {"path": "b"})]))
    again = run.intent("r2", READ_FILE, {"path": "b"})
    store.commit([again, Run.result(again, "B")])
    # The same cut again (allowed: a cut never moves backwards), compacted away already.
    store.commit([f.NewFact(f.CompactionEntry(summary="the same cut", throughEntryId=through))])
    store.commit(run.attempt())
    store.commit(run.answer("Read a and b."))
    store.commit(run.finish())
    # `%agent compact`: an operation of its own, cutting at the last entry (keeps nothing).
    compact = Run(environment=run.environment)
    op = compact.operation_id
    store.commit([f.compaction_started(op)])
    store.commit(compact.attempt())
    attempt = compact.attempt_id
    store.commit(
        [
            f.NewFact(
                f.CompactionEntry(
                    summary="everything so far",
                    throughEntryId=_last_entry(store),
                    attemptId=attempt,
                )
            )
        ]
    )
    store.commit([f.NewFact(f.OperationFinished(operationId=op, outcome="completed"))])
    complete_run(store, "after everything")


def _checkpoint_after_never_started_calls(store: SessionStore) -> None:
    run = Run(environment="/w")
    store.commit(run.start("two commands"))
    store.commit(run.attempt())
    store.commit(
        run.answer(None, [("c1", "bash", {"command": "a"}), ("c2", "bash", {"command": "b"})])
    )
    store.commit([f.NewFact(f.AbortRequested(operationId=run.operation_id, reason="Ctrl-C"))])
    store.commit([f.NewFact(f.OperationFinished(operationId=run.operation_id, outcome="aborted"))])
    through = _last_entry(store)  # the assistant whose calls never started
    store.commit([f.user_message("then this")])
    complete_run(store, "second")
    store.commit(
        [f.NewFact(f.CompactionEntry(summary="two calls never ran", throughEntryId=through))]
    )
    complete_run(store, "third")
    # A checkpoint keeping an aborted run whose two calls never started: their answers
    # are still owed at the end of what is sent.
    through = _last_entry(store)
    aborted = Run(environment="/w")
    store.commit(aborted.start("two more"))
    store.commit(aborted.attempt())
    store.commit(
        aborted.answer(None, [("c5", "bash", {"command": "e"}), ("c6", "bash", {"command": "f"})])
    )
    store.commit(
        [f.NewFact(f.OperationFinished(operationId=aborted.operation_id, outcome="aborted"))]
    )
    store.commit([f.NewFact(f.CompactionEntry(summary="three runs", throughEntryId=through))])


@pytest.mark.parametrize(
    "build",
    [
        _retry_abort_crash_recover_resume,
        _checkpoints_mid_run,
        _checkpoint_after_never_started_calls,
    ],
)
def test_the_context_of_a_hostile_run_is_the_references(
    build: Callable[[SessionStore], None],
) -> None:
    assert assert_every_state_sends_the_reference(_session(build)) > 15


def _crashed(path: Path, prompt: str) -> None:
    """A session whose kernel died while a bash call ran, after a compacted first run."""
    init = HeaderInit(
        cwd=str(path.parent),
        provider="openrouter",
        model="test/model",
        environment_identity=str(path.parent),
    )
    with SessionStore.open(path, create=init) as store:
        complete_run(store, f"{prompt}: first")
        store.commit(
            [
                f.NewFact(
                    f.CompactionEntry(
                        summary=f"{prompt} listed files", throughEntryId=_last_entry(store)
                    )
                )
            ]
        )
        run = Run(environment=str(path.parent))
        store.commit(run.start(prompt))
        store.commit(run.attempt())
        store.commit(run.answer(None, [("b1", "bash", {"command": "touch x"}), ("b2", "bash", {})]))
        store.commit([run.intent("b1", BASH, {"command": "touch x"})])


def test_the_first_request_after_a_switch_and_a_recovery_sends_the_references(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first, second = tmp_path / "a.agent.jsonl", tmp_path / "b.agent.jsonl"
    _crashed(first, "in a")
    _crashed(second, "in b")
    agent = NotebookRuntime(TinyAgent(base_url=server.base_url, model="test/model"), {})
    try:
        assert agent.open(_at(first)).recovery is not None
        # `%agent session` switches: b's dead run is settled at open, and a note is
        # committed before b's first request.
        assert agent.open(_at(second)).recovery is not None
        store = agent.require_store()
        store.commit([f.user_message("a note before the next run")])
        expected: list[list[Any]] = []

        def at_request(facts: Sequence[Fact]) -> None:
            if any(
                isinstance(fact, RecordFact) and isinstance(fact.record, StepAttempt)
                for fact in facts
            ):
                state = store.load()  # the system prompt as the file recorded it for this request
                expected.append(_reference(state, state.system_prompt))

        store.subscribe(at_request)
        server.enqueue(text_reply("done"))
        result = agent.run("and now?", observer=LoopObserver(), ask=None)
        assert result.outcome == "completed"
    finally:
        agent.close()
    sent = server.requests[0].body["messages"]
    assert _plain(json.dumps(sent).encode()) == expected[0]
    assert "in b listed files" in sent[2]["content"]
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == ["b1", "b2"]
