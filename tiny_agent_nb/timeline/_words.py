"""A tool call and a run in words: the name the model called a tool by, what happened to
a call, its replay policy (docs/glossary.md), a run's ending. From the file: the caller
escapes them."""

from __future__ import annotations

from ..session import Operation, SessionState, ToolIntent
from ..words import tool_label

# A policy is what recovery would do after a crash, not what happened: the timeline says
# it in a tooltip, never on the call's line. The file says `safeRead` / `never`.
REPLAY_WORDS = {"safeRead": "re-read after a crash", "never": "never re-run"}

# What happened to a call, where its status alone does not say it.
OUTCOME_WORDS = {
    "replayed": "re-read after a crash",
    "interrupted": "it may have run; it was not run again",
}
# A call cut off by a stop its run recorded: the process lived on and stopped the call
# itself, so nothing is unknown but how far it got.
STOPPED_CALL = "its effects up to then are kept"


def outcome_note(status: str, stopped_by: str | None = None) -> str | None:
    """What happened to a call whose status is `status`; None when the status says it all.
    `stopped_by`: the reason of its run's abort, which (not a crash) cut an `interrupted`
    call of an aborted run off."""
    if status == "interrupted" and stopped_by:
        return f"{stopped_by}; {STOPPED_CALL}"
    return OUTCOME_WORDS.get(status)


def call_outcome(state: SessionState, intent: ToolIntent) -> str:
    """`interrupted — it may have run; it was not run again`, for `inspect` and `%agent
    status` alike."""
    operation = state.operations.get(intent.operation_id)
    note = outcome_note(intent.status, operation.aborted_reason if operation else None)
    return f"{intent.status} — {note}" if note else intent.status


def replay_note(policy: str) -> str:
    """A call's replay policy as its tooltip says it (docs/spec.md §2.1)."""
    return f"replay policy: {REPLAY_WORDS.get(policy, policy)} if a crash cuts this call off"


def called_name(state: SessionState, intent: ToolIntent) -> str:
    """The name the model called the tool by, which `--tools` takes: an MCP tool's
    `<server>__<tool>`, where the intent's identity keeps the server's own name."""
    attempt = state.attempts.get(intent.attempt_id)
    for call_id, name in attempt.tool_calls if attempt is not None else ():
        if call_id == intent.tool_call_id:
            return name
    return intent.tool.name


def intent_label(state: SessionState, intent: ToolIntent) -> str:
    """`tool_label` of a recorded call: `time__get_current_time · mcp:time`."""
    return tool_label(called_name(state, intent), intent.tool.source)


def runs_text(state: SessionState) -> str:
    """How many runs the session holds, and how many replayed one (no model call)."""
    replays = sum(op.kind == "replay" for op in state.operations.values())
    replayed = f" ({replays} replayed from the session, no model call)" if replays else ""
    return f"{len(state.operations)}{replayed}"


def run_text(operation: Operation) -> str:
    """A run's kind and ending, with its detail or stop reason (`run stepLimit — 20 steps
    reached`)."""
    note = operation.detail or operation.aborted_reason
    return f"{operation.kind} {operation.status}" + (f" — {note}" if note else "")


def rewound_by(state: SessionState) -> dict[str, int]:
    """The operations a rewind took off the conversation's path (docs/spec.md §17), each
    with the number of the rewind that did (the last one, where an undo brought it back
    and another rewind took it off again)."""
    numbers = {op_id: n for n, op_id in enumerate(state.operations, 1)}

    def chain(op_id: str | None) -> set[str]:
        ids = set()
        while op_id is not None:
            ids.add(op_id)
            op_id = state.operations[op_id].parent
        return ids

    off: dict[str, int] = {}
    head: str | None = None
    for op in state.operations.values():
        if op.kind != "rewind":
            head = op.id
            continue
        target = state.operations.get(op.rewinds_operation_id or "")
        before, head = chain(head), target.parent if target is not None else head
        after = chain(head)
        off.update(dict.fromkeys(before - after, numbers[op.id]))
        for back in after:
            off.pop(back, None)
    return off


def rewinds_text(state: SessionState) -> str | None:
    """`2 (the last, run 7, went back to before run 3); runs 3, 4 left the conversation`;
    None for a session never rewound."""
    numbers = {op_id: n for n, op_id in enumerate(state.operations, 1)}
    rewinds = [op for op in state.operations.values() if op.kind == "rewind"]
    if not rewinds:
        return None
    last = rewinds[-1]
    target = numbers.get(last.rewinds_operation_id or "")
    text = f"{len(rewinds)} (the last, run {numbers[last.id]}, went back to before run {target})"
    gone = sorted(numbers[op_id] for op_id in rewound_by(state))
    if gone:
        runs = ", ".join(map(str, gone))
        text += f"; run{'s' if len(gone) > 1 else ''} {runs} left the conversation"
    return text
