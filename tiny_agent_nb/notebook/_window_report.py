"""What `%agent status` and `%agent summary` say about the context: the model's window
(configured, learned by this session, or the default) and the latest checkpoint's summary;
and `%agent forget-window`, which clears the window the session learned.
"""

from __future__ import annotations

from ..agent import DEFAULT_CONTEXT_WINDOW, describe_origin
from ..render import cell_text
from ..session import CompactionEntry, SessionState, SessionStore
from ..session import facts as f
from ..words import shorten
from ._provider import KernelProvider

FORGET = "`%agent forget-window` forgets it"
SUMMARY_SHOWN = 240  # characters of the summary `%agent status` shows


def window_line(model: KernelProvider, state: SessionState) -> str:
    """The window the next run uses for the configured model, and where it comes from."""
    if model.config.demo_mode():
        return "the offline demo model has no context window"
    config = model.provider_config()
    learned = state.context_windows.get(config.window_key)
    said = ""
    if learned is not None:
        said = f"{learned.tokens} tokens, {describe_origin(learned.source)}"
    if model.config.context_window:
        line = f"window {model.config.context_window} tokens (TinyAgent.context_window)"
        return line + (f"; the session learned {said} ({FORGET})" if said else "")
    if said:
        return f"window {said} (kept in this session; {FORGET})"
    return (
        f"window {DEFAULT_CONTEXT_WINDOW} tokens by default, until the server states one "
        "(its metadata, or its answer to a request too long)"
    )


def forget_window(model: KernelProvider, store: SessionStore) -> str:
    """`%agent forget-window`: record that the session knows no window for the configured
    model at its server (docs/spec.md §8), so no kernel takes the learned one again."""
    if model.config.demo_mode():
        return "The offline demo model has no context window: nothing to forget."
    config = model.provider_config()
    key = config.window_key
    where = f"{cell_text(config.model)} at {cell_text(config.redacted_base_url)}"
    learned = store.learned_window(*key)
    if learned is None:
        return f"This session has learned no context window for {where}: nothing to forget."
    store.commit([f.forgotten_window(*key)])
    said = f"{learned.tokens} tokens, {describe_origin(learned.source)}"
    return (
        f"Forgot the context window this session learned for {where} ({said}); the session "
        "file records it, so no kernel takes that window again. The next run takes "
        "TinyAgent.context_window when set, else the window the server's metadata states, "
        f"else {DEFAULT_CONTEXT_WINDOW} tokens."
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
