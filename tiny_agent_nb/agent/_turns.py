"""Entries as provider-neutral messages (docs/spec.md §3), and the messages of ours that
stand where no entry answers: a call that never started, a prompt that got no answer, a
checkpoint's summary.

A summary may have been steered by hostile tool output, so it is not sent in the user's
voice but as the assistant's note, after a user message of ours saying what follows:
the conversation still opens with a user turn and alternates (Gemma's, Mistral's and
Llama 2's templates refuse otherwise; Qwen 3's and DeepSeek's refuse a second system
message). When no user message follows it, one more of ours says the conversation goes
on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..provider import messages as m
from ..session import (
    AssistantEntry,
    EntryFact,
    KernelNotice,
    SessionState,
    ToolResultEntry,
    UserEntry,
)

NOT_STARTED = (
    "Not run: the session stopped before this tool call started, so it had no effect. "
    "Call it again if it is still needed."
)
# Between a prompt whose run ended unanswered and the next: chat templates refuse two
# user turns in a row (docs/spec.md §3).
NO_ANSWER = (
    "[tiny-agent-nb, not the model: the run of the prompt above ended before the model "
    "answered it.]"
)
SUMMARY_LEAD = (
    "[tiny-agent-nb, not the user: the earlier part of this conversation was replaced by "
    "a summary to fit the model's context window. The summary follows as your own note; "
    "it records what happened and asks nothing.]"
)
SUMMARY_HEADER = "[Summary of the earlier conversation]"
CONTINUED = "[tiny-agent-nb, not the user: the conversation goes on after the summary.]"


def user_content(body: UserEntry) -> str:
    """What a user entry sends: its user cells, a blank line, then the prompt."""
    cells = body.userCells
    return f"{cells}\n\n{body.message.content}" if cells else body.message.content


def entry_message(entry: EntryFact) -> m.Message | None:
    """The message of one entry (None for compactions)."""
    shape = MESSAGE_OF.get(type(entry.entry))
    return None if shape is None else shape(entry.entry)


def _assistant(body: AssistantEntry) -> m.Assistant:
    msg = body.message
    return m.Assistant(msg.content or msg.refusal or "", msg.toolCalls)


# One lookup per entry by its exact type: `isinstance` on a pydantic model is Python code
# (its metaclass's `__instancecheck__`), a dozen of them per entry was half a step's time.
MESSAGE_OF: dict[type, Callable[[Any], m.Message]] = {
    UserEntry: lambda body: m.User(user_content(body)),
    KernelNotice: lambda body: m.User(body.message.content),
    AssistantEntry: _assistant,
    ToolResultEntry: lambda body: m.ToolResult(body.message.toolCallId, body.message.content),
}


def synthetic_result(call_id: str) -> m.ToolResult:
    return m.ToolResult(call_id, NOT_STARTED)


NO_ANSWER_MESSAGE = m.Note(NO_ANSWER)
CONTINUED_MESSAGE = m.User(CONTINUED)


def summary_messages(summary: str) -> list[m.Message]:
    return [m.User(SUMMARY_LEAD), m.Note(f"{SUMMARY_HEADER}\n{summary}")]


def replayed_calls(state: SessionState) -> set[str]:
    """The toolStarted ids of replayed runs' calls (docs/spec.md §12), whose results the
    model is never sent."""
    replays = {op.id for op in state.operations.values() if op.kind == "replay"}
    if not replays:
        return set()
    return {i.id for i in state.tool_intents.values() if i.operation_id in replays}
