"""The active context: what the model is sent, built from the session for each request.

`build_context` is a pure function of the state (as pi-mono's `buildSessionContext`):
nothing is kept between requests, and a new kernel sends what the old one would have.

Not entries, but sent: the system prompt; a checkpoint's summary (`_turns.py`); a kernel
notice (docs/spec.md §9), its own user message only where no user entry follows it, else
a paragraph before the prompt in one user turn; a synthetic "not run" result for a tool
call that never started (true by construction: intent is written before effect;
providers refuse an unanswered call); and, between a prompt that got no answer and the
next, an assistant note of ours (chat templates refuse two user turns in a row). Not
sent: the results of a replayed run's calls (docs/spec.md §12), and what a rewind left
behind (only the path from the head is, docs/spec.md §17).
"""

from __future__ import annotations

from ..provider import messages as m
from ..session import (
    CompactionEntry,
    KernelNotice,
    SessionState,
    ToolResultEntry,
    UserEntry,
)
from ._turns import (
    CONTINUED_MESSAGE,
    MESSAGE_OF,
    NO_ANSWER_MESSAGE,
    replayed_calls,
    summary_messages,
    synthetic_result,
    user_content,
)


def build_context(
    state: SessionState, system_prompt: str | None, *, until: str | None = None
) -> m.Built:
    """What the next request sends (docs/spec.md §3); `until`: what the request answered
    by that entry of the path sent (the entries before it)."""
    path = state.entry_path()
    if until is not None:
        path = path[: path.index(until)]
    entries = state.entries
    # Only the latest checkpoint counts: a cut never moves backwards (format §4, rule 12).
    summary: str | None = None
    start = 0
    for entry_id in reversed(path):
        checkpoint = entries[entry_id].entry
        if type(checkpoint) is CompactionEntry:
            summary = checkpoint.summary
            start = path.index(checkpoint.throughEntryId) + 1
            break
    replayed = replayed_calls(state)
    sent = m.Built()
    unanswered: dict[str, None] = {}  # the calls of the last assistant message
    ends_with_user = False
    notice: str | None = None  # a kernel notice waiting for the next entry

    def send(message: m.Message) -> None:
        nonlocal unanswered, ends_with_user
        user = isinstance(message, m.User)  # plain dataclasses: a cheap check
        if isinstance(message, m.ToolResult):
            unanswered.pop(message.tool_call_id, None)
        elif unanswered:
            sent.extend(synthetic_result(call_id) for call_id in unanswered)
            unanswered = {}
        if user and ends_with_user:
            sent.append(NO_ANSWER_MESSAGE)
        ends_with_user = user
        sent.append(message)
        if isinstance(message, m.Assistant):
            unanswered = {call.id: None for call in message.tool_calls}

    # `type(...) is`, not `isinstance`: the latter is Python code on a pydantic model.
    for entry_id in path[start:]:
        body = entries[entry_id].entry
        if type(body) is ToolResultEntry and body.toolStartedId in replayed:
            continue
        if notice is not None:
            waiting, notice = notice, None
            if type(body) is UserEntry:
                send(m.User(m.with_notice(waiting, user_content(body))))
                continue
            send(m.User(waiting))
        if type(body) is KernelNotice:
            notice = body.message.content
        elif type(body) is not CompactionEntry:
            send(MESSAGE_OF[type(body)](body))
    sent.extend(synthetic_result(call_id) for call_id in unanswered)
    if notice is not None:
        if ends_with_user:
            sent.append(NO_ANSWER_MESSAGE)
        sent.append(m.User(notice))
    head: list[m.Message] = [m.System(system_prompt)] if system_prompt else []
    if summary is not None:
        head += summary_messages(summary)
        if not (sent and isinstance(sent[0], m.User)):
            head.append(CONTINUED_MESSAGE)
    sent[:0] = head
    return sent
