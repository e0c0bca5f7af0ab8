"""A session's runs in words, for `tiny-agent-nb inspect` and `%agent status` alike."""

from __future__ import annotations

from ..session import Operation, SessionState


def runs_text(state: SessionState) -> str:
    """How many runs the session holds, and how many replayed one (no model call)."""
    replays = sum(op.kind == "replay" for op in state.operations.values())
    replayed = f" ({replays} replayed from the session, no model call)" if replays else ""
    return f"{len(state.operations)}{replayed}"


def run_text(operation: Operation) -> str:
    """A run's kind and how it ended, with the detail or the stop's reason it recorded
    (`run stepLimit — 20 steps reached`). From the file: the caller escapes it."""
    note = operation.detail or operation.aborted_reason
    return f"{operation.kind} {operation.status}" + (f" — {note}" if note else "")
