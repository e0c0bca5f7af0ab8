"""What the crash loops of tests/test_agent_crash.py and test_agent_crash_random.py
check after every kill and resume: what a killed process committed is still there,
every pending intent got exactly one result, the requests a resume sent were accepted.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiny_agent_nb.agent import INTERRUPTED_RESULT, NOT_STARTED
from tiny_agent_nb.session import (
    NotASessionError,
    SessionState,
    ToolIntent,
    ToolResultEntry,
    load_session,
)

from helpers.openai_server import (
    RecordedRequest,
    usage,
)

TIMEOUT_S = 20.0
STEP_USAGE = usage(100, 10, cost=0.001)
RESUME_USAGE = usage(140, 6, cost=0.0004)
APPEND_X = "echo x >> marker.txt"


def try_load(path: Path) -> SessionState | None:
    """The session as a reader sees it while a writer may still be appending."""
    try:
        return load_session(path)
    except (FileNotFoundError, NotASessionError):
        return None


def pending(path: Path, tool: str) -> bool:
    state = try_load(path)
    return state is not None and any(
        i.tool.name == tool and i.status == "pending" for i in state.tool_intents.values()
    )


# ---------------------------------------------------------------- snapshots and checks


@dataclass(frozen=True)
class Snapshot:
    """The session file right after a kill."""

    raw: bytes
    state: SessionState

    @classmethod
    def take(cls, path: Path) -> Snapshot:
        raw = path.read_bytes()
        return cls(raw, load_session(path))  # a kill never leaves a file that fails to load

    @property
    def committed(self) -> bytes:
        return self.raw[: self.raw.rfind(b"\n") + 1]

    @property
    def pending_intents(self) -> list[ToolIntent]:
        return [i for i in self.state.tool_intents.values() if i.status == "pending"]

    def where(self) -> str:
        """What the file shows in flight when the process died (for a resume killed
        before it recovered: what the previous process left)."""
        state = self.state
        op = state.open_operation
        if op is None:
            return "no operation open"
        intents = sorted({i.tool.name for i in self.pending_intents})
        if intents:
            return "tool running: " + "+".join(intents)
        if any(a.status == "pending" for a in state.attempts.values()):
            return "model request in flight"
        if op.unanswered_tool_calls:
            return "between tool calls"
        return "between commits"


def usage_facts(state: SessionState) -> dict[str, Any]:
    return {f.id: f for f in state.facts if f.kind == "usage"}


def results_per_intent(state: SessionState) -> Counter[str]:
    """Tool result entries in the file, counted per toolStarted (duplicates would show)."""
    return Counter(
        f.entry.toolStartedId
        for f in state.facts
        if f.kind == "entry" and isinstance(f.entry, ToolResultEntry)
    )


def check_after_kill(
    snapshots: Sequence[Snapshot], state: SessionState, raw: bytes, workspace: Path
) -> None:
    """What must hold once a new process, working in `workspace`, recovered after each
    of `snapshots`' kills."""
    environment = os.path.realpath(workspace)
    assert state.torn_tail_bytes == 0 and raw.endswith(b"\n")
    usage_after = usage_facts(state)
    for snap in snapshots:
        # Append-only: every byte the killed process committed is still there.
        assert raw.startswith(snap.committed)
        # Usage: every fact present before is present after, totals never shrink.
        assert usage_facts(snap.state).items() <= usage_after.items()
        before, after = snap.state.totals.summary(), state.totals.summary()
        assert all(before[k] <= after[k] for k in before if before[k] is not None), (before, after)
        # Every intent left pending got its one result: replayed if it was a safe read of
        # the same workspace, else interrupted (never run again).
        for intent in snap.pending_intents:
            same = intent.environment_identity == environment
            replay = intent.replay_policy == "safeRead" and same
            expected = "replayed" if replay else "interrupted"
            assert state.tool_intents[intent.id].status == expected, intent
        if snap.state.open_operation is not None:
            assert state.operations[snap.state.open_operation.id].status == "interrupted"
    assert state.open_operation is None
    assert all(a.status != "pending" for a in state.attempts.values())
    assert all(i.status != "pending" for i in state.tool_intents.values())
    assert results_per_intent(state) == Counter(dict.fromkeys(state.tool_intents, 1))


def check_resumes(snapshots: Sequence[Snapshot], state: SessionState) -> list[str]:
    """The operations started after the first kill are resumes, each continuing the one
    before it. Returns their ids."""
    known = set(snapshots[0].state.operations)
    operations = list(state.operations.values())
    new = [op for op in operations if op.id not in known]
    for op in new:
        previous = operations[operations.index(op) - 1]
        assert op.kind == "resume" and op.resumes_operation_id == previous.id, op
        assert previous.status == "interrupted"
    return [op.id for op in new]


@dataclass
class RequestStats:
    not_started: set[str] = field(default_factory=set)  # calls answered "Not run"
    cut: int = 0  # bodies a kill cut short (the server refused them)
    after_answer: int = 0  # requests ending with an assistant message (see below)


def check_requests(requests: Sequence[RecordedRequest], state: SessionState) -> RequestStats:
    """Every request the server got was a valid conversation it answered; every tool
    message says what the session says."""
    by_call = {i.tool_call_id: i for i in state.tool_intents.values()}
    stats = RequestStats()
    for request in requests:
        assert request.finished.wait(TIMEOUT_S), request
        if request.problem is not None:
            # Only a body cut short by the kill of its sender may be refused (the refusal
            # then finds the client gone).
            declared = int(request.headers.get("content-length", "-1"))
            assert request.body is None and len(request.raw) < declared, request.problem
            stats.cut += 1
            continue
        assert request.status == 200, (request.status, request.problem)
        # A kill after a final answer settled but before operationFinished: the operation
        # is interrupted and its resume asks the model again after its own answer.
        stats.after_answer += request.body["messages"][-1]["role"] == "assistant"
        for message in request.body["messages"]:
            if message["role"] != "tool":
                continue
            intent = by_call.get(message["tool_call_id"])
            if intent is None:
                assert message["content"] == NOT_STARTED, message
                stats.not_started.add(message["tool_call_id"])
                continue
            result = state.entries[intent.result_entry_id].entry
            assert isinstance(result, ToolResultEntry)
            assert message["content"] == result.message.content, message
            if intent.status == "interrupted":
                assert message["content"] == INTERRUPTED_RESULT, message
    return stats


def marker_lines(workspace: Path) -> list[str]:
    marker = workspace / "marker.txt"
    return marker.read_text().splitlines() if marker.exists() else []


def tool_messages(request: RecordedRequest) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"] for m in request.body["messages"] if m["role"] == "tool"
    }
