"""A tool call in words: the name the model called it by, what happened to it, and its
replay policy (docs/glossary.md)."""

from __future__ import annotations

from ..session import SessionState, ToolIntent
from ..words import tool_label

# What a tool call's replay policy means after a crash, in the words every surface uses
# (the file says `safeRead` / `never`; docs/glossary.md). A policy is what recovery would
# do, not what happened: the timeline says it in a tooltip, never on the call's line.
REPLAY_WORDS = {"safeRead": "re-read after a crash", "never": "never re-run"}

# What happened to a call, where its status alone does not say it: a call re-run after a
# crash (`replayed`), one cut off by a crash (`interrupted`).
OUTCOME_WORDS = {
    "replayed": "re-read after a crash",
    "interrupted": "it may have run; it was not run again",
}
# A call cut off by a stop its run recorded, after the stop's reason: the process lived
# on and stopped the call itself, so nothing is unknown but how far it got.
STOPPED_CALL = "its effects up to then are kept"


def outcome_note(status: str, stopped_by: str | None = None) -> str | None:
    """What happened to a call whose status is `status`, in words; None when the status
    says it all (`completed`, `error`, `denied`, `pending`). `stopped_by`: the reason of
    its run's abort (`abortRequested.reason`), which is what cut an `interrupted` call
    of an aborted run off, not a crash."""
    if status == "interrupted" and stopped_by:
        return f"{stopped_by}; {STOPPED_CALL}"
    return OUTCOME_WORDS.get(status)


def call_outcome(state: SessionState, intent: ToolIntent) -> str:
    """What happened to a recorded call, and why where its status does not say it
    (`interrupted — it may have run; it was not run again`), in the cell's words, for
    `inspect` and `%agent status` alike. From the file: the caller escapes it."""
    operation = state.operations.get(intent.operation_id)
    note = outcome_note(intent.status, operation.aborted_reason if operation else None)
    return f"{intent.status} — {note}" if note else intent.status


def replay_note(policy: str) -> str:
    """A call's replay policy as a tooltip says it: what recovery does with the call if a
    crash cuts it off (docs/spec.md §2.1)."""
    return f"replay policy: {REPLAY_WORDS.get(policy, policy)} if a crash cuts this call off"


def called_name(state: SessionState, intent: ToolIntent) -> str:
    """The name the model called the tool by, which `--tools` takes: an MCP tool's
    `<server>__<tool>` (`time__get_current_time`), where the intent's identity keeps the
    server's own name (`get_current_time`); a built-in tool's name is both."""
    attempt = state.attempts.get(intent.attempt_id)
    for call_id, name in attempt.tool_calls if attempt is not None else ():
        if call_id == intent.tool_call_id:
            return name
    return intent.tool.name


def intent_label(state: SessionState, intent: ToolIntent) -> str:
    """`tool_label` of a recorded call: the name the model called, and an MCP tool's
    source (`time__get_current_time · mcp:time`). From the file: the caller escapes it."""
    return tool_label(called_name(state, intent), intent.tool.source)
