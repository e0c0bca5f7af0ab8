"""What a compaction summarizes (docs/spec.md §3): the cut, and the summarization request.

The cut (`throughEntryId`) is the newest entry after the previous cut such that every
tool call at or before it has its result at or before it, with at least the tail to keep
after it, verbatim. The tail is never more than TAIL_SHARE of the window, so a compaction
always leaves room. A summary that grew past its share is summarized again on its own,
at the same cut. Sizes are estimates of the bytes as sent (`RunWindow.estimate`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from .._exceptions import TinyAgentError
from ..provider import messages as m
from ..session import (
    AssistantEntry,
    CompactionEntry,
    KernelNotice,
    SessionState,
    ToolResultEntry,
    UserEntry,
)
from ._turns import entry_message, replayed_calls, user_content
from ._types import NoCleanCut, NoRoomReason

TAIL_SHARE = 0.25  # of the window: the most the verbatim tail keeps
SUMMARY_SHARE = 0.15  # of the window: a summary's size (asked for; a larger one is re-sent cut)
TRANSCRIPT_SHARE = 0.45  # of the window: the transcript a summarization request shows
ENTRY_CHARS = 4_000  # characters of one entry a summarization request shows at most
WORDS_PER_TOKEN = 0.75  # English prose, roughly: the summary's length is asked in words

SUMMARIZER_PROMPT = (
    "You summarize an agent's working session so that the agent can continue the work "
    "from your summary alone. The earlier entries will be replaced by it; the most "
    "recent ones stay verbatim after it."
)
SUMMARY_REQUEST = (
    "Write the summary now. Keep what the rest of the work needs: the user's goals and "
    "requests, decisions made and why, files read, created or changed (with paths), "
    "commands run and what they showed, results found, and open problems or next steps. "
    "Drop chatter and tool output that no longer matters. Plain text, concise, at most "
    "{words} words."
)

Tokens = Callable[[int], int]  # tokens of a byte count


class NoRoom(TinyAgentError):
    """No compaction can make room in the context window: `reason` says why."""

    def __init__(self, reason: NoRoomReason) -> None:
        super().__init__(reason.statement())
        self.reason = reason


@dataclass(frozen=True)
class Cut:
    through_entry_id: str
    entries: tuple[str, ...]  # ids of the entries the summary covers (since the last cut)
    previous_summary: str | None
    tail_bytes: int = 0  # of the entries kept after the cut, as sent


@dataclass(frozen=True)
class Budget:
    """What a compaction may keep and send, from the window (tokens)."""

    window: int
    keep_tail_tokens: int

    @property
    def tail(self) -> int:
        return min(self.keep_tail_tokens, int(self.window * TAIL_SHARE))

    @property
    def tail_cap(self) -> int:
        return int(self.window * TAIL_SHARE)

    @property
    def summary(self) -> int:
        return int(self.window * SUMMARY_SHARE)


def choose_cut(state: SessionState, budget: Budget, tokens: Tokens) -> Cut:
    entries = state.entries
    ids = state.entry_path()  # a compaction summarizes the conversation, not a rewound branch
    previous_summary: str | None = None
    previous_cut: str | None = None
    start = 0
    for index in range(len(ids) - 1, -1, -1):
        if entries.type_of(ids[index]) == "compaction":
            body = entries[ids[index]].entry
            assert isinstance(body, CompactionEntry)
            previous_summary, previous_cut = body.summary, body.throughEntryId
            start = ids.index(body.throughEntryId) + 1
            break
    # A replayed run's results are no part of the conversation (docs/spec.md §12).
    replayed = replayed_calls(state)
    candidates = [
        i
        for i in ids[start:]
        if entries.type_of(i) != "compaction" and not _replayed(state, i, replayed)
    ]
    sizes: list[int] = []
    clean: list[bool] = []
    open_calls: set[str] = set()
    for entry_id in candidates:
        entry = entries[entry_id]
        body = entry.entry
        if isinstance(body, ToolResultEntry):
            open_calls.discard(body.message.toolCallId)
        elif isinstance(body, AssistantEntry):
            # Calls of an earlier assistant entry that never got a result never will
            # (they never started): the context answers them "not run".
            open_calls = {c.id for c in body.message.toolCalls}
        else:
            open_calls = set()
        message = entry_message(entry)
        assert message is not None  # compactions are not candidates
        sizes.append(m.size(message) + 1)  # as the context counts it, with its comma
        # A run's kernel notice shares its prompt's user turn (agent/_context.py): a cut
        # between the two would keep the notice's text and summarize it too.
        clean.append(not open_calls and not isinstance(body, KernelNotice))
    tail = 0
    found: int | None = None
    smaller: int | None = None  # the clean cut with the largest tail still under the keep
    for index in range(len(candidates) - 1, -1, -1):
        if clean[index]:
            if tokens(tail) >= budget.tail:
                found = index
                if tokens(tail) > budget.tail_cap and smaller is not None:
                    found = smaller  # the tail at the keep is past its cap: keep less
                    tail = sum(sizes[found + 1 :])
                break
            smaller = index
        tail += sizes[index]
    if found is not None:
        return Cut(candidates[found], tuple(candidates[: found + 1]), previous_summary, tail)
    summary_bytes = len((previous_summary or "").encode())
    if previous_cut is not None and tokens(summary_bytes) > budget.summary:
        # Nothing new to summarize, but the summary itself is too large: summarize it
        # again on its own, at the same cut (a cut never moves backwards;
        # docs/session-format.md §4, rule 12).
        return Cut(previous_cut, (), previous_summary, sum(sizes))
    raise NoRoom(NoCleanCut(budget.tail, TAIL_SHARE, budget.window, tokens(tail)))


def summarization_request(
    state: SessionState,
    cut: Cut,
    instructions: str | None,
    budget: Budget,
    chars_per_token: float,
) -> list[m.Message]:
    """A transcript in one user message, so it is a valid conversation whatever the cut
    holds (no tool schemas needed), bounded by shares of the window."""
    limit_chars = int(budget.window * TRANSCRIPT_SHARE * chars_per_token)
    per_entry = max(200, min(ENTRY_CHARS, limit_chars // max(1, len(cut.entries))))
    summary_chars = int(budget.summary * chars_per_token)
    words = max(50, int(budget.summary * WORDS_PER_TOKEN))
    parts: list[str] = []
    if cut.previous_summary is not None:
        previous = clip(cut.previous_summary, summary_chars)
        parts.append(f"Summary of the work before:\n{previous}\n")
    parts.append("Entries since then:" if cut.entries else "No entries since then.")
    for entry_id in cut.entries:
        parts.append(_transcript_line(state, entry_id, per_entry))
    parts.append(SUMMARY_REQUEST.format(words=words))
    if instructions:
        parts.append(f"The user asks that the summary also: {instructions}")
    return [m.System(SUMMARIZER_PROMPT), m.User("\n\n".join(parts))]


def _transcript_line(state: SessionState, entry_id: str, limit: int) -> str:
    body = state.entries[entry_id].entry
    if isinstance(body, UserEntry):
        return "[user] " + clip(user_content(body), limit)
    if isinstance(body, KernelNotice):
        return "[kernel] " + clip(body.message.content, limit)
    if isinstance(body, AssistantEntry):
        msg = body.message
        calls = "".join(
            f"\n  -> {c.name}({clip(json.dumps(c.arguments, ensure_ascii=False), limit)})"
            for c in msg.toolCalls
        )
        return "[assistant] " + clip(msg.content or msg.refusal or "", limit) + calls
    assert isinstance(body, ToolResultEntry)
    return f"[tool result, {body.outcome}] " + clip(body.message.content, limit)


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit * 3 // 4]
    tail = text[len(text) - limit // 4 :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters left out ...]\n{tail}"


def _replayed(state: SessionState, entry_id: str, replayed: set[str]) -> bool:
    if not replayed or state.entries.type_of(entry_id) != "toolResult":
        return False
    body = state.entries[entry_id].entry
    return isinstance(body, ToolResultEntry) and body.toolStartedId in replayed
