"""The active context: what the model is sent, projected from entries as they commit.

Each entry is encoded to wire JSON (`provider.wire`) once, when it is committed, and
written after the others, comma-joined, into memory maps of SEALED_RUN bytes (`_Runs`).
A request sends a view of each map as it is, so the cost of a step does not grow with
the length of the history, and a kernel that restarts rebuilds the same projection from
the file the same way.

Four things are not entries but still reach the model:
- the system prompt, first;
- a checkpoint's summary, as the assistant's note after a user message of ours
  (`_summary.py` says why);
- a kernel notice (docs/spec.md §18) is its own user message only where no user entry
  follows it (a resume's); a run's reaches the model in its prompt's user turn, a
  paragraph before it, so the context never holds two user turns in a row;
- a tool call that never got a `toolStarted` (the kernel died, or the user interrupted,
  before it began) is answered with a synthetic tool message saying it never ran — true
  by construction, since intent is written before effect — because providers refuse a
  conversation with an unanswered tool call;
- between a prompt that got no answer (its run ended first) and the next prompt, an
  assistant message of ours saying so, as chat templates refuse two user turns in a row.
"""

from __future__ import annotations

import mmap
from array import array
from collections.abc import Callable, Iterable, Sequence

from ..provider import wire
from ..session import (
    AssistantEntry,
    AttemptFailed,
    CompactionEntry,
    EntryFact,
    Fact,
    KernelNotice,
    RecordFact,
    SessionState,
    StepAttempt,
    ToolResultEntry,
    UsageFact,
    UserEntry,
    usage_in_range,
)
from ._summary import continued, is_user_message, summary_messages

NOT_STARTED = (
    "Not run: the session stopped before this tool call started, so it had no effect. "
    "Call it again if it is still needed."
)
# Between a prompt whose run ended before the model answered it (a failed request, an
# interrupt, a budget already spent) and the next prompt: the strictest chat templates
# refuse two user turns in a row (docs/spec.md §10), so every later request would fail.
NO_ANSWER = (
    "[tiny-agent-nb, not the model: the run of the prompt above ended before the model "
    "answered it.]"
)


# A map holds this many bytes of messages (more only for one message larger than that).
SEALED_RUN = 1 << 20
# Private even across a fork (a `bash` or `python` tool's child): copy-on-write, like the
# heap. (Windows has no flags, and no fork.)
_PRIVATE = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}


# perf: register row "projection-maps" (docs/benchmarks.md)
class _Runs:
    """The encoded messages, comma-joined, written in order into anonymous memory maps of
    SEALED_RUN bytes each: a message that does not fit in the current map starts the
    next one (its own size if larger), and a map once left is sealed. A request sends a
    read-only view of each map's filled part, so its cost does not grow with the history,
    and each byte is copied once, when its message is appended.

    Why maps and not `bytes`: the context lives as long as the kernel, while building it
    decodes and encodes the whole history through short-lived objects. Runs kept in the
    C allocator's heap lay long-lived blocks among those temporaries, and the heap keeps
    every hole they leave resident (a kernel held 1.9x what its context sends after
    building it, 0.9x of it free heap). A map is outside that heap: only its written
    pages are resident, and it is returned whole when the projection lets go of it.
    Views stay valid as later messages are written after them (a map is never resized)."""

    def __init__(self) -> None:
        self._sealed: list[memoryview] = []
        self._map: mmap.mmap | None = None
        self._used = 0  # bytes of `_map` written
        self._length = 0  # of the messages joined with commas

    def append(self, message: bytes) -> int:
        """Add `message`; where it starts in the messages joined with commas."""
        offset = self._length + 1 if self._length else 0
        self._length = offset + len(message)
        run, used = self._map, self._used
        if run is None or used + 1 + len(message) > len(run):
            if run is not None:
                self._sealed.append(self._filled())
            run = self._map = mmap.mmap(-1, max(SEALED_RUN, len(message)), **_PRIVATE)
            used = 0
        elif used:
            run[used] = 44  # b","
            used += 1
        run[used : used + len(message)] = message
        self._used = used + len(message)
        return offset

    def _filled(self) -> memoryview:
        assert self._map is not None
        return memoryview(self._map).toreadonly()[: self._used]

    def parts(self) -> list[wire.Encoded]:
        """The maps' filled parts, which a request sends comma-joined."""
        return [*self._sealed, self._filled()] if self._map is not None else []

    def since(self, offset: int) -> bytes:
        """The messages from `offset` on, comma-joined (one copy, made at a checkpoint)."""
        kept: list[wire.Encoded] = []
        for part in self.parts():
            if offset < len(part):
                kept.append(part[max(offset, 0) :])
            offset -= len(part) + 1
        return b",".join(kept)


# perf: register row "projection-tuples" (docs/benchmarks.md)
# One entry as it is projected: (encoded wire message, the tool call ids it opens
# (assistant) or the one it answers (tool result)). What the projection keeps of it
# afterwards is its id (the string the session's tables hold already, when built from a
# state) and where its message starts in `_Runs` (an `array` of offsets): nothing the
# cyclic GC tracks, and no second copy of the message (a checkpoint slices the runs).
_Projected = tuple[bytes, tuple[str, ...], tuple[str, ...]]


def _project(entry: EntryFact) -> _Projected:
    body = entry.entry
    message = wire.entry_message(entry)
    assert message is not None  # compactions are handled before projecting
    encoded = wire.encode(message)
    if isinstance(body, AssistantEntry):
        return encoded, tuple(c.id for c in body.message.toolCalls), ()
    if isinstance(body, ToolResultEntry):
        return encoded, (), (body.message.toolCallId,)
    return encoded, (), ()


class ContextProjection:
    """Encoded messages of the active context, maintained one committed fact at a time."""

    def __init__(self, system_prompt: str | None) -> None:
        self._system: list[bytes] = []
        self.set_system_prompt(system_prompt)
        self._messages = _Runs()
        # Each projected entry's id and where its message starts: kept only to cut at a
        # compaction.
        self._entry_ids: list[str] = []
        self._offsets = array("q")
        self._unanswered: dict[str, None] = {}  # tool call ids of the last assistant entry
        self._ends_with_user = False  # the last projected message is a user message
        # The latest checkpoint's summary messages (none before one), whether its cut is
        # the checkpoint's (a later one may re-summarize the summary alone), and whether
        # the first message after them is a user message (None: nothing follows yet).
        self._summary: list[bytes] = []
        self._cut: str | None = None
        self._opens_with_user: bool | None = None
        self._ledger = _LastRequest()
        # A kernel notice whose message waits for the next entry: a user entry takes it
        # into its own turn; anything else (or a request) sends it alone.
        self._notice: tuple[str, str] | None = None
        # Set while the projection is deferred (`following`): how to read the session.
        self._load: Callable[[], SessionState] | None = None
        self._through_seq = 0  # facts up to here are in the projection already

    @classmethod
    def from_state(cls, state: SessionState, system_prompt: str | None) -> ContextProjection:
        projection = cls(system_prompt)
        for entry_id, entry in state.entries.items():  # the tables' own id strings
            projection._add(entry, entry_id)
        projection._ledger = _LastRequest.from_state(state)
        projection._through_seq = state.last_seq
        return projection

    # perf: register row "projection-deferred" (docs/benchmarks.md)
    @classmethod
    def following(
        cls, load: Callable[[], SessionState], system_prompt: str | None
    ) -> ContextProjection:
        """A projection of the session `load()` reads, built from it when first read (the
        next model request), not now: settling what a dead kernel left open does not
        need the context, and building it decodes and encodes the whole history.
        Subscribe its `apply` to the store: facts committed before the build are skipped
        (the build reads them from the session), later ones are projected as they commit."""
        projection = cls(system_prompt)
        projection._load = load
        return projection

    def _built(self) -> None:
        load = self._load
        if load is None:
            return
        # Built aside and then taken whole: a build that raises leaves the projection
        # deferred, so the next read tries again instead of sending half a history.
        built = ContextProjection.from_state(load(), None)
        self._messages, self._entry_ids, self._offsets = (
            built._messages,
            built._entry_ids,
            built._offsets,
        )
        self._unanswered, self._ledger = built._unanswered, built._ledger
        self._ends_with_user = built._ends_with_user
        self._summary, self._cut = built._summary, built._cut
        self._opens_with_user, self._notice = built._opens_with_user, built._notice
        self._through_seq, self._load = built._through_seq, None

    def set_system_prompt(self, system_prompt: str | None) -> None:
        """The first message of every request (not an entry: it may change between runs)."""
        self._system = [wire.system_message(system_prompt)] if system_prompt else []

    def apply(self, facts: Sequence[Fact]) -> None:
        """Store subscriber: project the entries among newly committed facts."""
        if self._load is not None or (facts and facts[-1].seq <= self._through_seq):
            return  # not built yet, or built from a state that holds these facts already
        starts = any(isinstance(f, RecordFact) and isinstance(f.record, StepAttempt) for f in facts)
        self._ledger.observe(facts, self.size() if starts else 0)
        self.extend(f for f in facts if isinstance(f, EntryFact))

    def last_input_tokens(self) -> int | None:
        """`last_input_tokens(state)` of the followed store, without a copy."""
        self._built()
        return self._ledger.tokens

    def last_request(self) -> tuple[int, int] | None:
        """The newest answered request of this context as (the server's count of its input
        tokens, the bytes of its messages), when this process sent it and the server
        counted it; None after a checkpoint (that context is gone)."""
        self._built()
        ledger = self._ledger
        if ledger.tokens is None or ledger.bytes is None:
            return None
        return ledger.tokens, ledger.bytes

    def size(self) -> int:
        """Bytes of the messages as a request carries them (each with its comma)."""
        return sum(len(m) + 1 for m in self.messages())

    def extend(self, entries: Iterable[EntryFact]) -> None:
        self._built()
        for entry in entries:
            self._add(entry, entry.id)

    def _add(self, entry: EntryFact, entry_id: str) -> None:
        body = entry.entry
        notice, self._notice = self._notice, None
        if isinstance(body, KernelNotice):
            self._send_alone(notice)
            self._notice = (entry_id, body.message.content)
        elif isinstance(body, UserEntry) and notice is not None:
            # One user turn, the notice a paragraph before the prompt; both entries start
            # where it does (a cut never falls between them: docs/spec.md §10).
            turn = wire.user_message(wire.with_notice(notice[1], wire.user_content(body)))
            self._append(notice[0], (turn, (), ()))
            self._entry_ids.append(entry_id)
            self._offsets.append(self._offsets[-1])
        elif isinstance(body, CompactionEntry):
            self._send_alone(notice)
            self._compact(body)
        else:
            self._send_alone(notice)
            self._append(entry_id, _project(entry))

    def _send_alone(self, notice: tuple[str, str] | None) -> None:
        if notice is not None:
            self._append(notice[0], (wire.user_message(notice[1]), (), ()))

    def _append(self, entry_id: str, projected: _Projected) -> None:
        message, opens, answers = projected
        if self._summary and self._opens_with_user is None:
            self._opens_with_user = is_user_message(message)
        if answers:
            self._unanswered.pop(answers[0], None)
        else:
            self._close_unanswered()
        user = is_user_message(message)
        if user and self._ends_with_user:
            self._messages.append(_NO_ANSWER_MESSAGE)
        self._ends_with_user = user
        self._entry_ids.append(entry_id)
        self._offsets.append(self._messages.append(message))
        if opens:
            self._unanswered = dict.fromkeys(opens)

    def _close_unanswered(self) -> None:
        for call_id in self._unanswered:
            self._messages.append(_synthetic_result(call_id))
        self._unanswered = {}

    def _compact(self, body: CompactionEntry) -> None:
        ids = self._entry_ids
        if body.throughEntryId == self._cut:
            # The same cut again: a summary too large re-summarized alone (docs/spec.md
            # §10). Only the summary changes.
            self._summary = summary_messages(body.summary)
            return
        if body.throughEntryId not in ids:
            return  # already compacted away by a later checkpoint
        cut = ids.index(body.throughEntryId) + 1
        keep_ids, keep_offsets = ids[cut:], self._offsets[cut:]
        self._summary, self._cut = summary_messages(body.summary), body.throughEntryId
        self._opens_with_user = None
        messages = _Runs()
        self._entry_ids, self._offsets = keep_ids, array("q")
        if keep_ids:
            # The messages from the first kept entry on are the ones a rebuild from the
            # kept entries would make: the cut is clean (docs/spec.md §5 rule 12), so the
            # first kept entry answers no call before it, and a never-started call's
            # synthetic answer before it stays out. `_unanswered` is the kept entries'.
            start = keep_offsets[0]
            kept = self._messages.since(start)
            self._opens_with_user = is_user_message(kept)
            moved = messages.append(kept) - start
            self._offsets = array("q", [offset + moved for offset in keep_offsets])
        else:
            self._unanswered = {}
            self._ends_with_user = False  # the summary, the assistant's note, is last
        self._messages = messages

    def messages(self) -> list[wire.Encoded]:
        """System prompt, projected entries, and answers for never-started tool calls, as
        encoded JSON objects or comma-joined runs of them (what `Provider` splices in)."""
        self._built()
        pending = [_synthetic_result(call_id) for call_id in self._unanswered]
        notice: list[bytes] = []
        if self._notice is not None:  # sent as `_append` will project it (no two user turns)
            notice = [_NO_ANSWER_MESSAGE] if self._ends_with_user else []
            notice.append(wire.user_message(self._notice[1]))
        summary = self._summary
        opens_with_user = self._opens_with_user
        if opens_with_user is None:  # nothing after the summary but, maybe, a notice
            opens_with_user = bool(notice)
        if summary and not opens_with_user:
            summary = [*summary, continued()]
        return [*self._system, *summary, *self._messages.parts(), *pending, *notice]

    def unanswered_tool_calls(self) -> list[str]:
        self._built()
        return list(self._unanswered)


def _synthetic_result(call_id: str) -> bytes:
    return wire.tool_message(call_id, NOT_STARTED)


_NO_ANSWER_MESSAGE = wire.encode({"role": "assistant", "content": NO_ANSWER})


def last_input_tokens(state: SessionState) -> int | None:
    """The server's input token count of the newest settled attempt, unless that attempt
    was a compaction (the context it measured is gone) or reported no usage."""
    for attempt in state.attempts_newest_first():  # newest first, no copy
        if attempt.status != "settled":
            continue
        if attempt.entry_id is None or state.entries.type_of(attempt.entry_id) != "assistant":
            return None
        usage = state.usage.get(attempt.id)
        return usage.inputTokens if usage is not None else None
    return None


# perf: register row "ledger-follow" (docs/benchmarks.md)
class _LastRequest:
    """`last_input_tokens` kept from the facts as they commit: O(1) per fact, where asking
    the state takes a copy of the whole session's state before every attempt.

    It relies on what the reducer enforces: one operation open at a time and one pending
    attempt per operation, so attempts settle in the order they start (the newest settled
    is the last one settled), and usage names an attempt at most once.
    """

    __slots__ = ("_pending", "_pending_bytes", "_pending_tokens", "_settled", "bytes", "tokens")

    def __init__(self) -> None:
        self.tokens: int | None = None
        # The bytes of the projection's messages when that attempt was about to be sent
        # (None when it was not sent by this process: built from a state).
        self.bytes: int | None = None
        self._pending_bytes: int | None = None
        self._settled: str | None = None  # newest settled attempt, if an assistant settled it
        self._pending: str | None = None  # the attempt that has neither settled nor failed
        self._pending_tokens: int | None = None  # its usage, committed before it settled

    @classmethod
    def from_state(cls, state: SessionState) -> _LastRequest:
        ledger = cls()
        ledger.tokens = last_input_tokens(state)
        for attempt in state.attempts_newest_first():
            if attempt.status == "pending":
                usage = state.usage.get(attempt.id)
                ledger._pending = attempt.id
                ledger._pending_tokens = usage.inputTokens if usage is not None else None
            elif attempt.status == "settled":
                if state.entries.type_of(attempt.entry_id or "") == "assistant":
                    ledger._settled = attempt.id
                break
        return ledger

    def observe(self, facts: Sequence[Fact], size: int = 0) -> None:
        """`size`: the projection's bytes now, when `facts` start an attempt."""
        for fact in facts:
            if isinstance(fact, UsageFact):
                attempt_id = fact.usage.attemptId
                if attempt_id is None or not usage_in_range(fact.usage):
                    continue  # a tool's usage, or none (out of range: docs/spec.md §11)
                if attempt_id == self._settled:
                    self.tokens = fact.usage.inputTokens
                elif attempt_id == self._pending:
                    self._pending_tokens = fact.usage.inputTokens
            elif isinstance(fact, RecordFact):
                record = fact.record
                if isinstance(record, StepAttempt):
                    self._pending, self._pending_tokens = fact.id, None
                    self._pending_bytes = size or None
                elif isinstance(record, AttemptFailed) and record.attemptId == self._pending:
                    self._pending = None
            else:
                body = fact.entry
                if isinstance(body, AssistantEntry):
                    ours = body.attemptId == self._pending
                    early = self._pending_tokens if ours else None
                    self._settled, self.tokens, self._pending = body.attemptId, early, None
                    self.bytes = self._pending_bytes if ours else None
                elif isinstance(body, CompactionEntry) and body.attemptId is not None:
                    # A compaction settles its attempt, and the context it measured is gone.
                    self._settled = self.tokens = self._pending = self.bytes = None
