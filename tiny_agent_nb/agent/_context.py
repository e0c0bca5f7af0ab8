"""The active context: what the model is sent, projected from entries as they commit.

Each entry is encoded to wire JSON (`provider.wire`) once, when it is committed, and kept
in comma-joined runs (`_Runs`, merged like a binary counter up to SEALED_RUN bytes: one
run per SEALED_RUN bytes of history and O(log n) more, each byte copied O(log SEALED_RUN)
times in its life). A request sends those runs as they are, so the cost of a step does
not grow with the length of the history, and a kernel that restarts rebuilds the same
projection from the file, each sealed run joined once (`_RunWriter`).

Two things are not entries but still reach the model:
- the system prompt, first;
- a tool call that never got a `toolStarted` (the kernel died, or the user interrupted,
  before it began) is answered with a synthetic tool message saying it never ran — true
  by construction, since intent is written before effect — because providers refuse a
  conversation with an unanswered tool call.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence

from ..provider import wire
from ..session import (
    AssistantEntry,
    AttemptFailed,
    CompactionEntry,
    EntryFact,
    Fact,
    RecordFact,
    SessionState,
    StepAttempt,
    ToolResultEntry,
    UsageFact,
)

NOT_STARTED = (
    "Not run: the session stopped before this tool call started, so it had no effect. "
    "Call it again if it is still needed."
)


# A run this long is sealed: it is never merged again (see `_Runs`).
SEALED_RUN = 1 << 20
_SEALED = -1  # the level of a sealed run: no run being merged ever has it


class _Joined:
    """Encoded messages kept in parts that a request sends comma-joined."""

    def parts(self) -> list[bytes]:
        raise NotImplementedError

    def since(self, offset: int) -> bytes:
        """The messages from `offset` on, comma-joined (one copy, made at a checkpoint)."""
        return b",".join(self.parts())[offset:]


# perf: register row "projection-runs" (docs/benchmarks.md)
# perf: register row "projection-sealed-runs" (docs/benchmarks.md)
class _Runs(_Joined):
    """Encoded messages, kept as a few comma-joined runs of doubling length, each sealed
    once it reaches SEALED_RUN bytes. Without the seal the last merge of a long history
    makes a run the size of the whole context out of two halves, and the C allocator
    keeps the holes such runs leave when freed: building the context of a long session
    grew the kernel's resident memory by about twice the context. Sealed, no run made
    and freed on the way is larger than twice SEALED_RUN, a byte is copied at most
    log2(SEALED_RUN / message size) times, and a request sends at most two runs per
    SEALED_RUN bytes of history (a run left unsealed before a sealed one is never
    merged again), plus O(log n)."""

    def __init__(self) -> None:
        # (level, run): a level counts the merges that made the run (2**level messages);
        # the unsealed levels at the end strictly decrease.
        self._runs: list[tuple[int, bytes]] = []
        self._length = 0  # of the runs joined with commas

    def append(self, message: bytes) -> int:
        """Add `message`; where it starts in the runs joined with commas."""
        offset = self._length + 1 if self._length else 0
        self._length = offset + len(message)
        level, run = 0, message
        while self._runs and self._runs[-1][0] == level:
            _, earlier = self._runs.pop()
            run = earlier + b"," + run
            if len(run) >= SEALED_RUN:
                level = _SEALED
                break
            level += 1
        self._runs.append((level, run))
        return offset

    def parts(self) -> list[bytes]:
        return [run for _, run in self._runs]


# perf: register row "projection-sealed-runs" (docs/benchmarks.md)
class _RunWriter(_Joined):
    """`_Runs` as a whole session's context is built: the messages are gathered until
    they fill a sealed run, which is then made at once, at its size. Merged two by two,
    the runs of every size below SEALED_RUN would be made and freed on the way, each
    byte copied up to log2(SEALED_RUN / message size) times."""

    def __init__(self) -> None:
        self._sealed: list[bytes] = []
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._length = 0  # of the messages joined with commas

    def append(self, message: bytes) -> int:
        offset = self._length + 1 if self._length else 0
        self._length = offset + len(message)
        self._pending.append(message)
        self._pending_size += len(message) + 1
        if self._pending_size > SEALED_RUN:
            self._sealed.append(b",".join(self._pending))
            self._pending, self._pending_size = [], 0
        return offset

    def parts(self) -> list[bytes]:
        return [*self._sealed, *self._pending]

    def runs(self) -> _Runs:
        """What `_Runs` would hold had each message been appended to it (up to where
        the last few messages were merged)."""
        runs = _Runs()
        runs._runs = [(_SEALED, run) for run in self._sealed]
        if self._pending:
            level = len(self._pending).bit_length() - 1  # less than 2**(level + 1) of them
            runs._runs.append((level, b",".join(self._pending)))
        runs._length = self._length
        self._sealed, self._pending = [], []
        return runs


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
        self._messages: _Runs | _RunWriter = _Runs()
        # Each projected entry's id and where its message starts: kept only to cut at a
        # compaction.
        self._entry_ids: list[str] = []
        self._offsets = array("q")
        self._unanswered: dict[str, None] = {}  # tool call ids of the last assistant entry
        self._ledger = _LastRequest()
        # Set while the projection is deferred (`following`): how to read the session.
        self._load: Callable[[], SessionState] | None = None
        self._through_seq = 0  # facts up to here are in the projection already

    @classmethod
    def from_state(cls, state: SessionState, system_prompt: str | None) -> ContextProjection:
        projection = cls(system_prompt)
        projection._messages = _RunWriter()
        for entry_id, entry in state.entries.items():  # the tables' own id strings
            projection._add(entry, entry_id)
        # Still a writer: a checkpoint met on the way makes a new one (`_compact`).
        assert isinstance(projection._messages, _RunWriter)
        projection._messages = projection._messages.runs()
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
        self._through_seq, self._load = built._through_seq, None

    def set_system_prompt(self, system_prompt: str | None) -> None:
        """The first message of every request (not an entry: it may change between runs)."""
        self._system = [wire.system_message(system_prompt)] if system_prompt else []

    def apply(self, facts: Sequence[Fact]) -> None:
        """Store subscriber: project the entries among newly committed facts."""
        if self._load is not None or (facts and facts[-1].seq <= self._through_seq):
            return  # not built yet, or built from a state that holds these facts already
        self._ledger.observe(facts)
        self.extend(f for f in facts if isinstance(f, EntryFact))

    def last_input_tokens(self) -> int | None:
        """`last_input_tokens(state)` of the followed store, without a snapshot."""
        self._built()
        return self._ledger.tokens

    def extend(self, entries: Iterable[EntryFact]) -> None:
        self._built()
        for entry in entries:
            self._add(entry, entry.id)

    def _add(self, entry: EntryFact, entry_id: str) -> None:
        body = entry.entry
        if isinstance(body, CompactionEntry):
            self._compact(body)
        else:
            self._append(entry_id, _project(entry))

    def _append(self, entry_id: str, projected: _Projected) -> None:
        message, opens, answers = projected
        if answers:
            self._unanswered.pop(answers[0], None)
        else:
            self._close_unanswered()
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
        if body.throughEntryId not in ids:
            return  # already compacted away by a later checkpoint
        cut = ids.index(body.throughEntryId) + 1
        keep_ids, keep_offsets = ids[cut:], self._offsets[cut:]
        summary = f"[Summary of the earlier conversation]\n{body.summary}"
        # A checkpoint met while building from a whole session keeps building the same way.
        messages = _RunWriter() if isinstance(self._messages, _RunWriter) else _Runs()
        messages.append(wire.user_message(summary))
        self._entry_ids, self._offsets = keep_ids, array("q")
        if keep_ids:
            # The messages from the first kept entry on are the ones a rebuild from the
            # kept entries would make: the cut is clean (docs/spec.md §5 rule 12), so the
            # first kept entry answers no call before it, and a never-started call's
            # synthetic answer before it stays out. `_unanswered` is the kept entries'.
            start = keep_offsets[0]
            moved = messages.append(self._messages.since(start)) - start
            self._offsets = array("q", [offset + moved for offset in keep_offsets])
        else:
            self._unanswered = {}
        self._messages = messages

    def messages(self) -> list[bytes]:
        """System prompt, projected entries, and answers for never-started tool calls, as
        encoded JSON objects or comma-joined runs of them (what `Provider` splices in)."""
        self._built()
        pending = [_synthetic_result(call_id) for call_id in self._unanswered]
        return [*self._system, *self._messages.parts(), *pending]

    def unanswered_tool_calls(self) -> list[str]:
        self._built()
        return list(self._unanswered)


def _synthetic_result(call_id: str) -> bytes:
    return wire.tool_message(call_id, NOT_STARTED)


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
    the state takes a snapshot of the whole session before every attempt.

    It relies on what the reducer enforces: one operation open at a time and one pending
    attempt per operation, so attempts settle in the order they start (the newest settled
    is the last one settled), and usage names an attempt at most once.
    """

    __slots__ = ("_pending", "_pending_tokens", "_settled", "tokens")

    def __init__(self) -> None:
        self.tokens: int | None = None
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

    def observe(self, facts: Sequence[Fact]) -> None:
        for fact in facts:
            if isinstance(fact, UsageFact):
                attempt_id = fact.usage.attemptId
                if attempt_id is None:
                    continue  # a tool's usage
                if attempt_id == self._settled:
                    self.tokens = fact.usage.inputTokens
                elif attempt_id == self._pending:
                    self._pending_tokens = fact.usage.inputTokens
            elif isinstance(fact, RecordFact):
                record = fact.record
                if isinstance(record, StepAttempt):
                    self._pending, self._pending_tokens = fact.id, None
                elif isinstance(record, AttemptFailed) and record.attemptId == self._pending:
                    self._pending = None
            else:
                body = fact.entry
                if isinstance(body, AssistantEntry):
                    early = self._pending_tokens if body.attemptId == self._pending else None
                    self._settled, self.tokens, self._pending = body.attemptId, early, None
                elif isinstance(body, CompactionEntry) and body.attemptId is not None:
                    # A compaction settles its attempt, and the context it measured is gone.
                    self._settled = self.tokens = self._pending = None
