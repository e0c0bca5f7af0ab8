"""What `%agent status` and `%agent summary` say about the context: the model's window
(configured, learned by this session, or the default) and the latest checkpoint's summary.
"""

from __future__ import annotations

from ..agent import DEFAULT_CONTEXT_WINDOW
from ..render import cell_text
from ..session import CompactionEntry, SessionState
from ..words import shorten
from ._provider import KernelProvider

# How each origin of a window reads (docs/spec.md §17's sources).
_LEARNED = {
    "listing": "as the server's metadata states it",
    "refusal": "as the server said when it refused a request too long",
    "truncation": "as many as the server read of a prompt it cut",
}
SUMMARY_SHOWN = 240  # characters of the summary `%agent status` shows


def window_line(model: KernelProvider, state: SessionState) -> str:
    """The window the next run uses for the configured model, and where it comes from."""
    if model.config.demo_mode():
        return "the offline demo model has no context window"
    config = model.provider_config()
    learned = state.context_windows.get((config.redacted_base_url, config.model))
    said = ""
    if learned is not None:
        said = f"{learned.tokens} tokens, {_LEARNED.get(learned.source, learned.source)}"
    if model.config.context_window:
        line = f"window {model.config.context_window} tokens (TinyAgent.context_window)"
        return line + (f"; the session learned {said}" if said else "")
    if said:
        return f"window {said} (kept in this session)"
    return (
        f"window {DEFAULT_CONTEXT_WINDOW} tokens by default, until the server states one "
        "(its metadata, or its answer to a request too long)"
    )


def latest_summary(state: SessionState) -> str | None:
    for entry_id in reversed(list(state.entries)):
        if state.entries.type_of(entry_id) == "compaction":
            body = state.entries[entry_id].entry
            assert isinstance(body, CompactionEntry)
            return body.summary
    return None


def summary_line(state: SessionState) -> str | None:
    """The start of the latest summary, for `%agent status`."""
    summary = latest_summary(state)
    if summary is None:
        return None
    return f"{cell_text(shorten(summary, SUMMARY_SHOWN))} (`%agent summary` shows it whole)"


def summary_text(state: SessionState) -> str:
    """`%agent summary`: the latest summary whole, as the model is sent it."""
    summary = latest_summary(state)
    if summary is None:
        return "No summary yet: the conversation has not been compacted."
    return (
        "The summary the model is sent in place of the earlier conversation (as its own "
        "note, not as your words):\n\n" + cell_text(summary, keep_lines=True)
    )
