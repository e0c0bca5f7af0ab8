"""Compaction (docs/spec.md §10): a model attempt that replaces early entries by a summary.

    stepAttempt                      -> summarization request (no tools)
    [compaction entry, usage]        or attemptFailed

The compaction entry settles its attempt, so the context changes in one transaction or
not at all: a crash or Ctrl-C before it leaves a pending (then failed) attempt and the
context exactly as it was, and recovery has nothing to redo.

The cut (`throughEntryId`) is the newest entry such that every tool call at or before it
has its result at or before it, with at least `keep_tail_tokens` of the newest entries
after it (kept verbatim: the model keeps the exact text of what it just did), and after
the previous cut (a summary covers the previous summary plus what followed it).

Token counts are estimates (UTF-8 bytes / 4) except where the ledger has the server's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..provider import Completion, ProviderError, wire
from ..render import usd  # the one money format (docs/glossary.md)
from ..session import (
    AssistantEntry,
    CompactionEntry,
    KernelNotice,
    SessionState,
    SessionStore,
    ToolResultEntry,
    UserEntry,
    new_id,
)
from ..session import facts as f
from ..tools import ToolSchema
from ._planner import attempt_usage

# When neither the trait nor the server says how big the model's window is: small enough
# for most models served today (local ones included), so compaction comes early, not late.
DEFAULT_CONTEXT_WINDOW = 32_768
CONTEXT_LENGTH = "contextLength"  # ProviderError.kind of "the request is too long"
ENTRY_CHARS = 4_000  # characters of one entry a summarization request shows at most

SUMMARIZER_PROMPT = (
    "You summarize an agent's working session so that the agent can continue the work "
    "from your summary alone. The earlier entries will be replaced by it; the most "
    "recent ones stay verbatim after it."
)
SUMMARY_REQUEST = (
    "Write the summary now. Keep what the rest of the work needs: the user's goals and "
    "requests, decisions made and why, files read, created or changed (with paths), "
    "commands run and what they showed, results found, and open problems or next steps. "
    "Drop chatter and tool output that no longer matters. Plain text, concise."
)


def estimate_tokens(byte_count: int) -> int:
    return (byte_count + 3) // 4


class Summarizer(Protocol):
    def complete(
        self,
        messages: Sequence[wire.Encoded],
        tools: Sequence[ToolSchema],
        *,
        on_event: None = None,
    ) -> Completion: ...


@dataclass(frozen=True)
class Cut:
    through_entry_id: str
    entries: tuple[str, ...]  # ids of the entries the summary covers (since the last cut)
    previous_summary: str | None


@dataclass(frozen=True)
class Compacted:
    """What one compaction did (the cell's line, the timeline and status say this)."""

    entry_id: str
    entries: int  # entries summarized
    tokens_before: int
    tokens_after: int
    cost: float | None  # USD; None when the server did not report it


def compaction_line(c: Compacted) -> str:
    """One line for the cell and the status: what was summarized, tokens, cost."""
    cost = usd(c.cost) if c.cost is not None else "cost unknown"
    return (
        f"compacted {c.entries} entries into a summary: ~{c.tokens_before} → "
        f"~{c.tokens_after} tokens of context · {cost}"
    )


def compaction_status(state: SessionState) -> str | None:
    """`%agent status`'s line: how many checkpoints, and what the latest replaced."""
    ids = [i for i in state.entries if state.entries.type_of(i) == "compaction"]
    if not ids:
        return None
    body = state.entries[ids[-1]].entry
    assert isinstance(body, CompactionEntry)
    usage = state.usage.get(body.attemptId or "")
    before = f"~{body.tokensBefore} tokens" if body.tokensBefore is not None else "a context"
    cost = "cost unknown" if usage is None or usage.cost is None else usd(usage.cost)
    return (
        f"{len(ids)} compaction(s); the latest summarized {before} into "
        f"{len(body.summary)} characters · {cost}"
    )


class NoRoom(Exception):
    """No clean cut leaves `keep_tail_tokens` verbatim and summarizes anything."""


class CompactionFailed(Exception):
    """The summarization attempt failed (its attemptFailed is committed)."""


def choose_cut(state: SessionState, keep_tail_tokens: int) -> Cut:
    entries = state.entries
    ids = list(entries)
    previous_summary: str | None = None
    start = 0
    for index in range(len(ids) - 1, -1, -1):
        if entries.type_of(ids[index]) == "compaction":
            body = entries[ids[index]].entry
            assert isinstance(body, CompactionEntry)
            previous_summary = body.summary
            start = ids.index(body.throughEntryId) + 1
            break
    candidates = [i for i in ids[start:] if entries.type_of(i) != "compaction"]
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
        message = wire.entry_message(entry)
        sizes.append(estimate_tokens(len(json.dumps(message, ensure_ascii=False).encode())))
        clean.append(not open_calls)
    tail = 0
    for index in range(len(candidates) - 1, -1, -1):
        if tail >= keep_tail_tokens and clean[index]:
            return Cut(candidates[index], tuple(candidates[: index + 1]), previous_summary)
        tail += sizes[index]
    raise NoRoom(
        f"no part of the conversation can be summarized: keeping the newest "
        f"{keep_tail_tokens} tokens verbatim (TinyAgent.keep_tail_tokens) leaves nothing "
        "before them that ends cleanly (every tool call with its result)"
    )


def summarization_request(
    state: SessionState, cut: Cut, instructions: str | None, limit_chars: int
) -> list[bytes]:
    """The request's messages: a transcript in one user message, so it is a valid
    conversation whatever the cut region holds (tool calls need no schemas here)."""
    per_entry = max(200, min(ENTRY_CHARS, limit_chars // max(1, len(cut.entries))))
    parts: list[str] = []
    if cut.previous_summary is not None:
        parts.append(f"Summary of the work before:\n{cut.previous_summary}\n")
    parts.append("Entries since then:")
    for entry_id in cut.entries:
        parts.append(_transcript_line(state, entry_id, per_entry))
    parts.append(SUMMARY_REQUEST)
    if instructions:
        parts.append(f"The user asks that the summary also: {instructions}")
    messages = [
        {"role": "system", "content": SUMMARIZER_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
    return [json.dumps(m, ensure_ascii=False).encode() for m in messages]


def _transcript_line(state: SessionState, entry_id: str, limit: int) -> str:
    body = state.entries[entry_id].entry
    if isinstance(body, UserEntry):
        return "[user] " + _clip(body.message.content, limit)
    if isinstance(body, KernelNotice):
        return "[kernel] " + _clip(body.message.content, limit)
    if isinstance(body, AssistantEntry):
        msg = body.message
        calls = "".join(
            f"\n  -> {c.name}({_clip(json.dumps(c.arguments, ensure_ascii=False), limit)})"
            for c in msg.toolCalls
        )
        return "[assistant] " + _clip(msg.content or msg.refusal or "", limit) + calls
    assert isinstance(body, ToolResultEntry)
    return f"[tool result, {body.outcome}] " + _clip(body.message.content, limit)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit * 3 // 4]
    tail = text[len(text) - limit // 4 :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters left out ...]\n{tail}"


@dataclass(frozen=True)
class AttemptLabel:
    """What a compaction's stepAttempt says about the model (the run's own values)."""

    provider: str
    model: str
    configuration_digest: str


class Compactor:
    """Decides when a run needs room and makes it (the loop calls it before attempts)."""

    def __init__(
        self,
        store: SessionStore,
        provider: Summarizer,
        label: AttemptLabel,
        *,
        context_window: int | None,
        threshold: float,
        keep_tail_tokens: int,
        request_bytes: Callable[[], int],
        ledger_tokens: Callable[[], int | None],
        on_compaction: Callable[[Compacted], None],
    ) -> None:
        """`request_bytes`: the size of the request the run would send now;
        `ledger_tokens`: `last_input_tokens` of the session now (the projection follows it,
        so no attempt pays for a snapshot of the whole session)."""
        self._on_compaction = on_compaction
        self._store = store
        self._provider = provider
        self._label = label
        self.window = context_window or DEFAULT_CONTEXT_WINDOW
        self._threshold = threshold
        self._keep_tail_tokens = keep_tail_tokens
        self._request_bytes = request_bytes
        self._ledger_tokens = ledger_tokens

    def context_tokens(self) -> int:
        """The ledger's count of the last request where there is one, or the estimate of
        the next one, whichever is larger (tool results since then are not in the former)."""
        estimate = estimate_tokens(self._request_bytes())
        return max(estimate, self._ledger_tokens() or 0)

    def needed(self) -> bool:
        return self.context_tokens() >= self._threshold * self.window

    def check(self) -> None:
        """Raises NoRoom when there is nothing to compact (nothing committed)."""
        choose_cut(self._store.load(), self._keep_tail_tokens)

    def make_room(self, operation_id: str, step: int, attempt: int, *, forced: bool) -> str | None:
        """Before an attempt: compact when the context passed its threshold, or when the
        server said it is too long (`forced`). The run's failure detail when it cannot go
        on, else None."""
        if not forced and not self.needed():
            return None
        try:
            self.run(operation_id, step, attempt)
        except NoRoom as exc:
            if not forced:
                return None  # past the threshold is not yet too long: the request may fit
            return too_long_detail(self.window, str(exc))
        except CompactionFailed as exc:
            return too_long_detail(self.window, str(exc))
        return None

    def run(
        self, operation_id: str, step: int, attempt: int, instructions: str | None = None
    ) -> Compacted:
        """One compaction attempt. Raises NoRoom before committing anything, and
        CompactionFailed after committing the attempt's failure."""
        tokens_before = self.context_tokens()
        state = self._store.load()
        cut = choose_cut(state, self._keep_tail_tokens)
        # The transcript gets about half the window (4 characters a token, roughly): the
        # summarization request must fit the window it is making room in.
        messages = summarization_request(state, cut, instructions, self.window * 2)
        attempt_id = new_id()
        label = self._label
        self._store.commit(
            [
                f.step_attempt(
                    operation_id,
                    step=step,
                    attempt=attempt,
                    provider=label.provider,
                    model=label.model,
                    configuration_digest=label.configuration_digest,
                    id=attempt_id,
                )
            ]
        )
        try:
            completion = self._provider.complete(messages, [])
        except ProviderError as error:
            self._fail(attempt_id, error)
            raise CompactionFailed(f"the summarization request failed: {error.message}") from error
        summary = (completion.message.content or "").strip()
        if not summary:
            empty = ProviderError(
                "the model answered the summarization request with no text",
                kind="protocol",
                retryable=False,
            )
            self._fail(attempt_id, empty)
            raise CompactionFailed(empty.message)
        entry_id = new_id()
        facts = [
            f.compaction(
                summary,
                cut.through_entry_id,
                attempt_id=attempt_id,
                tokens_before=tokens_before,
                id=entry_id,
            )
        ]
        facts += attempt_usage(attempt_id, completion.usage)
        self._store.commit(facts)
        done = Compacted(
            entry_id=entry_id,
            entries=len(cut.entries),
            tokens_before=tokens_before,
            tokens_after=estimate_tokens(self._request_bytes()),
            cost=completion.usage.cost if completion.usage is not None else None,
        )
        self._on_compaction(done)
        return done

    def _fail(self, attempt_id: str, error: ProviderError) -> None:
        self._store.commit(
            [
                f.attempt_failed(
                    attempt_id,
                    kind=error.kind,
                    message=error.message,
                    retryable=error.retryable,
                    status=error.status,
                )
            ]
        )


def too_long_detail(window: int, reason: str) -> str:
    """A run's detail when its request does not fit even after compacting."""
    return (
        f"the conversation does not fit the model's context window ({window} tokens) even "
        f"after compacting: {reason}. Everything is kept in the session. Next: `%agent "
        "compact` with instructions to keep less, a smaller TinyAgent.keep_tail_tokens, a "
        "bigger TinyAgent.context_window if the model has one, or `%agent new` to start a "
        "fresh session"
    )
