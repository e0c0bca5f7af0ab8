"""Entries as the messages the model is sent (docs/spec.md §10, items 3 and 5), in no
provider's wire format (`provider.messages`)."""

from __future__ import annotations

from ..provider import messages as m
from ..session import AssistantEntry, EntryFact, KernelNotice, ToolResultEntry, UserEntry


def user_content(body: UserEntry) -> str:
    """What a user entry sends: its user cells, a blank line, then the prompt."""
    cells = body.userCells
    return f"{cells}\n\n{body.message.content}" if cells else body.message.content


def entry_message(entry: EntryFact) -> m.Message | None:
    """The message of one entry (None for compactions)."""
    body = entry.entry
    if isinstance(body, UserEntry):
        return m.User(user_content(body))
    if isinstance(body, KernelNotice):
        return m.User(body.message.content)
    if isinstance(body, AssistantEntry):
        msg = body.message
        return m.Assistant(msg.content or msg.refusal or "", msg.toolCalls)
    if isinstance(body, ToolResultEntry):
        return m.ToolResult(body.message.toolCallId, body.message.content)
    return None
