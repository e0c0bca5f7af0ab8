"""The active context: what the model is sent, projected from entries as they commit.

Each entry becomes a provider-neutral message (`provider.messages`) once, when it is
committed, and is handed to the caches providers keep of the history, then let go: the
projection keeps only its size and where it starts, so a step's cost does not grow with
the history, and a new kernel rebuilds the same projection from the file.

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

from array import array
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar, cast

from ..provider import messages as m
from ..session import (
    AssistantEntry,
    CompactionEntry,
    EntryFact,
    Fact,
    KernelNotice,
    OperationStarted,
    RecordFact,
    SessionState,
    StepAttempt,
    ToolResultEntry,
    ToolStarted,
    UserEntry,
)
from ._turns import (
    CONTINUED_MESSAGE,
    NO_ANSWER_MESSAGE,
    Projected,
    in_replay,
    project,
    summary_messages,
    synthetic_result,
    user_content,
)

C = TypeVar("C", bound=m.HistoryCache)
Makers = dict[Hashable, Callable[[], m.HistoryCache]]


class _Log:
    """The history's message count and bytes as a request carries them (each with its
    comma); the messages themselves are in the caches, each in its provider's form."""

    __slots__ = ("bytes", "caches", "count")

    def __init__(self, makers: Makers) -> None:
        self.caches: dict[Hashable, m.HistoryCache] = {key: make() for key, make in makers.items()}
        self.count = 0
        self.bytes = 0

    def append(self, message: m.Message) -> tuple[int, int]:
        """Hand `message` to every cache; its index and where it starts."""
        start = self.count, self.bytes
        encoded = m.canonical(message)
        self.count += 1
        self.bytes += len(encoded) + 1
        for cache in self.caches.values():
            cache.append(message, encoded)
        return start

    def drop(self, count: int, size: int) -> None:
        """Forget the first `count` messages, of `size` bytes (a checkpoint's cut)."""
        self.count -= count
        self.bytes -= size
        for cache in self.caches.values():
            cache.drop(count, size)


class ContextProjection:
    """The active context, maintained one committed fact at a time: the `History` of
    the contexts it hands out (`context()`)."""

    def __init__(self, system_prompt: str | None, makers: Makers | None = None) -> None:
        """A projection of the entries it is given (`extend`, `apply`); it keeps their
        messages (`MessageList`) unless `makers` names other caches."""
        self._system: list[m.Message] = []
        self._system_bytes = 0
        self.set_system_prompt(system_prompt)
        self._makers: Makers = {m.MESSAGES: m.MessageList} if makers is None else dict(makers)
        self._log = _Log(self._makers)
        # Each projected entry's id, and where its message starts, two numbers per entry in
        # one `array` (to cut at a compaction): its index, and its bytes before it shifted
        # left, bit 0 set for a user message. One buffer: a second one growing beside it
        # left heap holes that stayed resident (test_agent_context_memory.py).
        self._entry_ids: list[str] = []
        self._starts = array("q")
        self._unanswered: dict[str, None] = {}  # tool call ids of the last assistant entry
        self._ends_with_user = False  # the last projected message is a user message
        # The latest checkpoint's summary messages and cut, and whether the first message
        # after them is a user message (None: nothing follows yet).
        self._summary: list[m.Message] = []
        self._summary_bytes = 0
        self._cut: str | None = None
        self._opens_with_user: bool | None = None
        # The bytes of the attempt last started (its id), then of the one last answered,
        # when this projection saw it start: a server's count of that request calibrates
        # the estimate (`_window.Measure`).
        self._sending: tuple[str, int] | None = None
        self._sent: int | None = None
        # A kernel notice waiting for the next entry: a user entry takes it into its turn.
        self._notice: tuple[str, str] | None = None
        # How to read the session: while deferred (`following`), and for a later cache.
        self._load: Callable[[], SessionState] | None = None
        self._reload: Callable[[], SessionState] | None = None
        self._through_seq = 0  # facts up to here are in the projection already
        # The replays seen committing, and their intents: their results stay out.
        self._replays: set[str] = set()
        self._replay_intents: set[str] = set()

    @classmethod
    def from_state(cls, state: SessionState, system_prompt: str | None) -> ContextProjection:
        """The projection of `state`, keeping its messages."""
        return cls._from_state(state, system_prompt, {m.MESSAGES: m.MessageList})

    @classmethod
    def _from_state(
        cls, state: SessionState, system_prompt: str | None, makers: Makers
    ) -> ContextProjection:
        projection = cls(system_prompt, makers)
        entries = state.entries
        # The path from the head (docs/spec.md §17): the tables' own id strings.
        for entry_id in state.entry_path():
            entry = entries[entry_id]
            if not in_replay(state, entry):
                projection._add(entry, entry_id)
        open_op = state.open_operation
        if open_op is not None and open_op.kind == "replay":  # its results are to come
            projection._replays.add(open_op.id)
            intents = state.tool_intents.values()
            projection._replay_intents.update(i.id for i in intents if i.operation_id == open_op.id)
        projection._through_seq = state.last_seq
        return projection

    # perf: register row "projection-deferred" (docs/benchmarks.md)
    @classmethod
    def following(
        cls, load: Callable[[], SessionState], system_prompt: str | None
    ) -> ContextProjection:
        """A projection of the session `load()` reads, built at its first read (the next
        model request): recovering a dead kernel's work does not need it, and building
        decodes the whole history. Subscribe its `apply` to the store: facts the build
        reads from the session are skipped, later ones projected as they commit."""
        projection = cls(system_prompt, {})  # it reads its messages again from `load`
        projection._load = projection._reload = load
        return projection

    def _built(self) -> None:
        load = self._load
        if load is None:
            return
        # Built aside and then taken whole: a build that raises leaves the projection
        # deferred, so the next read tries again instead of sending half a history.
        built = ContextProjection._from_state(load(), None, self._makers)
        self._log, self._entry_ids, self._starts = built._log, built._entry_ids, built._starts
        self._unanswered = built._unanswered
        self._ends_with_user = built._ends_with_user
        self._summary, self._summary_bytes = built._summary, built._summary_bytes
        self._cut, self._opens_with_user = built._cut, built._opens_with_user
        self._notice = built._notice
        self._replays, self._replay_intents = built._replays, built._replay_intents
        self._through_seq, self._load = built._through_seq, None

    def cache(self, key: Hashable, make: Callable[[], C]) -> C:
        """`History.cache`: one asked for before the build is built into; after it, filled
        from the messages kept, else by a rebuild from the session (once per key)."""
        if self._load is not None and key in self._makers:
            self._built()  # a rewind left the caches to be built again (docs/spec.md §17)
        found = self._log.caches.get(key)
        if found is None:
            self._makers[key] = make
            listed = self._log.caches.get(m.MESSAGES)
            if self._load is None and isinstance(listed, m.MessageList):
                made = make()
                for message in listed.messages:
                    made.append(message, m.canonical(message))
                self._log.caches[key] = made
            else:
                self._load = self._load or self._reload
                assert self._load is not None, "a projection keeps what it cannot read again"
                self._built()
            found = self._log.caches[key]
        return cast("C", found)

    def keep(self, key: Hashable, make: Callable[[], m.HistoryCache]) -> None:
        """Keep `make`'s cache under `key` (a provider's: `messages.history_cache`); asked
        before the first read, the build goes straight into it."""
        if self._load is not None:
            self._makers[key] = make
        else:
            self.cache(key, make)

    def set_system_prompt(self, system_prompt: str | None) -> None:
        # Not an entry: it may change between runs.
        self._system = [m.System(system_prompt)] if system_prompt else []
        self._system_bytes = sum(m.size(message) + 1 for message in self._system)

    def apply(self, facts: Sequence[Fact]) -> None:
        """Store subscriber: project the entries among newly committed facts."""
        if self._load is not None or (facts and facts[-1].seq <= self._through_seq):
            return  # not built yet, or built from a state that holds these facts already
        for fact in facts:
            record = fact.record if isinstance(fact, RecordFact) else None
            body = fact.entry if isinstance(fact, EntryFact) else None
            rewind = isinstance(record, OperationStarted) and record.operationKind == "rewind"
            if rewind and self._reload is not None:
                # The head moved back (docs/spec.md §17): rare, so the projection is
                # built again from the session at its next read, not undone in place
                # (one `from_state` made has no session to read: it is for tests).
                self._load = self._reload
                self._sending = self._sent = None  # a measure of a context now gone
                return
            if isinstance(record, StepAttempt):
                self._sending = (fact.id, self.size())
            elif isinstance(body, AssistantEntry | CompactionEntry) and body.attemptId:
                sending = self._sending
                # A compaction's request measured a context that is gone.
                answered = isinstance(body, AssistantEntry)
                ours = answered and sending is not None and sending[0] == body.attemptId
                self._sent = sending[1] if ours and sending is not None else None
            elif isinstance(record, OperationStarted) and record.operationKind == "replay":
                self._replays.add(record.operationId)
            elif isinstance(record, ToolStarted) and record.operationId in self._replays:
                self._replay_intents.add(fact.id)
        replayed = self._replay_intents
        self.extend(
            f
            for f in facts
            if isinstance(f, EntryFact)
            and not (isinstance(f.entry, ToolResultEntry) and f.entry.toolStartedId in replayed)
        )

    def sent_bytes(self) -> int | None:
        """The bytes of the messages of the newest answered request, when this projection
        saw it start; None after a checkpoint or a request it did not see."""
        self._built()  # before the next attempt commits: the projection then sees it
        return self._sent

    def size(self) -> int:
        """Bytes of the messages as a request carries them (each with its comma)."""
        head, tail = self._around()
        fixed = self._system_bytes + self._summary_bytes
        extra = sum(
            m.size(message) + 1 for message in head[len(self._system) + len(self._summary) :]
        )
        return fixed + extra + self._log.bytes + sum(m.size(message) + 1 for message in tail)

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
            # One user turn; both entries start where it does (no cut between them, §3).
            turn = m.User(m.with_notice(notice[1], user_content(body)))
            self._append(notice[0], (turn, (), ()))
            self._entry_ids.append(entry_id)
            self._starts.extend(self._starts[-2:])
        elif isinstance(body, CompactionEntry):
            self._send_alone(notice)
            self._compact(body)
        else:
            self._send_alone(notice)
            self._append(entry_id, project(entry))

    def _send_alone(self, notice: tuple[str, str] | None) -> None:
        if notice is not None:
            self._append(notice[0], (m.User(notice[1]), (), ()))

    def _append(self, entry_id: str, projected: Projected) -> None:
        message, opens, answers = projected
        user = isinstance(message, m.User)
        if self._summary and self._opens_with_user is None:
            self._opens_with_user = user
        if answers:
            self._unanswered.pop(answers[0], None)
        else:
            self._close_unanswered()
        if user and self._ends_with_user:
            self._log.append(NO_ANSWER_MESSAGE)
        self._ends_with_user = user
        self._entry_ids.append(entry_id)
        index, start = self._log.append(message)
        self._starts.extend((index, start << 1 | user))
        if opens:
            self._unanswered = dict.fromkeys(opens)

    def _close_unanswered(self) -> None:
        for call_id in self._unanswered:
            self._log.append(synthetic_result(call_id))
        self._unanswered = {}

    def _set_summary(self, summary: str) -> None:
        self._summary = summary_messages(summary)
        self._summary_bytes = sum(m.size(message) + 1 for message in self._summary)

    def _compact(self, body: CompactionEntry) -> None:
        ids = self._entry_ids
        if body.throughEntryId == self._cut:
            # The same cut again: a summary too large re-summarized alone (docs/spec.md
            # §3). Only the summary changes.
            self._set_summary(body.summary)
            return
        if body.throughEntryId not in ids:
            return  # already compacted away by a later checkpoint
        cut = ids.index(body.throughEntryId) + 1
        keep_ids, keep_starts = ids[cut:], self._starts[2 * cut :]
        self._set_summary(body.summary)
        self._cut = body.throughEntryId
        self._opens_with_user = None
        self._entry_ids, self._starts = keep_ids, array("q")
        if keep_ids:
            # What a rebuild from the kept entries would make: the cut is clean
            # (docs/session-format.md §4 rule 12), so the first kept entry answers no call
            # before it. `_unanswered` is the kept entries'.
            index, start = keep_starts[0], keep_starts[1] >> 1 << 1
            self._opens_with_user = bool(keep_starts[1] & 1)
            self._log.drop(index, start >> 1)
            moved = array("q", [index, start]) * len(keep_ids)
            self._starts = array(
                "q", [kept - by for kept, by in zip(keep_starts, moved, strict=True)]
            )
        else:
            self._unanswered = {}
            self._ends_with_user = False  # the summary, the assistant's note, is last
            self._log.drop(self._log.count, self._log.bytes)

    def context(self) -> m.Context:
        """What the next request sends: system prompt and summary, the history, then
        answers for never-started calls and a kernel notice waiting for its prompt."""
        return _ProjectedContext(self, self._around)

    def _around(self) -> tuple[list[m.Message], list[m.Message]]:
        """The head and the tail of the context now."""
        self._built()
        pending = [synthetic_result(call_id) for call_id in self._unanswered]
        notice: list[m.Message] = []
        if self._notice is not None:  # sent as `_append` will project it (no two user turns)
            notice = [NO_ANSWER_MESSAGE] if self._ends_with_user else []
            notice.append(m.User(self._notice[1]))
        summary = self._summary
        opens_with_user = self._opens_with_user
        if opens_with_user is None:  # nothing after the summary but, maybe, a notice
            opens_with_user = bool(notice)
        if summary and not opens_with_user:
            summary = [*summary, CONTINUED_MESSAGE]
        return [*self._system, *summary], [*pending, *notice]

    def unanswered_tool_calls(self) -> list[str]:
        self._built()
        return list(self._unanswered)


class _ProjectedContext(m.Context):
    """A projection's context: its head and tail read when first asked (after the
    provider asked the history for its cache, which builds a deferred projection)."""

    def __init__(
        self,
        projection: ContextProjection,
        around: Callable[[], tuple[list[m.Message], list[m.Message]]],
    ) -> None:
        super().__init__(history=projection)
        self._read_around = around  # the projection's head and tail now
        self._around: tuple[list[m.Message], list[m.Message]] | None = None

    def _parts(self) -> tuple[list[m.Message], list[m.Message]]:
        if self._around is None:
            self._around = self._read_around()
        return self._around

    @property
    def head(self) -> Sequence[m.Message]:
        return self._parts()[0]

    @property
    def tail(self) -> Sequence[m.Message]:
        return self._parts()[1]
