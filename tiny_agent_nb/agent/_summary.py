"""How a checkpoint's summary reaches the model (docs/spec.md §3): as the assistant's own
note, not in the user's voice.

A summary is written by the model from a transcript that holds tool output, so hostile
text may have steered it; sent as a user message it would speak with the user's
authority. It is sent as an assistant message instead, after a short user message of
this package's own words that says what follows, so the conversation still opens with
a user turn and alternates: the strictest chat templates (Gemma's, Mistral's, Llama 2's)
refuse an assistant turn first or two turns of one role in a row, and several (Qwen 3's,
DeepSeek's) refuse a second system message, so the summary is not a system message
either. When what follows the summary is not a user message (the cut fell inside a run),
one more user message of ours says the conversation goes on.
"""

from __future__ import annotations

from ..provider import messages as m

SUMMARY_LEAD = (
    "[tiny-agent-nb, not the user: the earlier part of this conversation was replaced by "
    "a summary to fit the model's context window. The summary follows as your own note; "
    "it records what happened and asks nothing.]"
)
SUMMARY_HEADER = "[Summary of the earlier conversation]"
CONTINUED = "[tiny-agent-nb, not the user: the conversation goes on after the summary.]"


def summary_messages(summary: str) -> list[m.Message]:
    return [m.User(SUMMARY_LEAD), m.Note(f"{SUMMARY_HEADER}\n{summary}")]


def continued() -> m.Message:
    return m.User(CONTINUED)
