"""The lookup tables a session file is reduced into, and their records.

A record's fields named as its payload model's (in snake_case) are copied from it
(`Tables.row`; by hand for the two made per model request and tool call): a record
declares which of the payload's fields it keeps, and the state the reducer adds.
Records are immutable NamedTuples, replaced when their status changes, so a copy of the
tables is shallow and never changes under its reader, and undoing a write is putting
the old record back.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel

from .._exceptions import TinyAgentError
from ._models import (
    AssistantEntry,
    CompactionEntry,
    EntryFact,
    KernelNotice,
    ToolOutcome,
    ToolResultEntry,
    Usage,
    UserEntry,
)
from ._records import (
    AttemptError,
    OperationKind,
    OperationOutcome,
    ReplayPolicy,
    RunOptions,
    ToolIdentity,
    WindowSource,
)
from ._usage import UsageTotals

OperationStatus = Literal["open"] | OperationOutcome
AttemptStatus = Literal["pending", "settled", "failed"]
IntentStatus = Literal["pending"] | ToolOutcome
IdRole = Literal["fact", "operation", "reserved"]
EntryType = Literal["user", "assistant", "toolResult", "compaction", "kernelNotice"]
_ENTRY_TYPES: dict[type, EntryType] = {
    UserEntry: "user",
    AssistantEntry: "assistant",
    ToolResultEntry: "toolResult",
    CompactionEntry: "compaction",
    KernelNotice: "kernelNotice",
}


def entry_type(fact: EntryFact) -> EntryType:
    return _ENTRY_TYPES[type(fact.entry)]


K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")
_new = tuple.__new__


# perf: register row "namedtuple-records" (docs/benchmarks.md)
class Operation(NamedTuple):
    id: str
    kind: OperationKind
    status: OperationStatus
    input_entry_id: str | None
    resumes_operation_id: str | None
    pending_attempts: int = 0
    pending_intents: int = 0
    # Tool calls of settled assistant entries that have no result yet: a provider refuses
    # a conversation in which a tool call has no tool message, so no attempt may start
    # while this is non-zero.
    unanswered_tool_calls: int = 0
    answered_tool_calls: int = 0  # tool results committed (tells a clean cut, see Tables)
    aborted_reason: str | None = None
    detail: str | None = None
    started_at: int = 0  # epoch ms of its runStarted
    options: RunOptions | None = None  # as its runStarted recorded them (None: unknown)
    cell_id: str | None = None  # the notebook cell of a run or a replay, when known
    replays_operation_id: str | None = None  # the run a replay replays
    rewinds_operation_id: str | None = None  # the operation a rewind goes back before
    # Where the conversation stood when it started (docs/spec.md §17): the head entry,
    # the operation head, and the cut (seq of its throughEntryId) of the last compaction
    # on the path. A rewind to before it puts all three back.
    head_before: str | None = None
    parent: str | None = None
    cut_before: int | None = None

    # perf: register row "record-updates" (docs/benchmarks.md)
    def counted(
        self, attempts: int = 0, intents: int = 0, unanswered: int = 0, answered: int = 0
    ) -> Operation:
        """This operation with its four counters moved by these amounts: the tuple built
        from slices of this one, not `_replace` (a keyword dict and a map over every
        field, 2.5x the time; a load does this several times per step)."""
        return _new(
            Operation,
            (
                *self[:5],
                self[5] + attempts,
                self[6] + intents,
                self[7] + unanswered,
                self[8] + answered,
                *self[9:],
            ),
        )


class Attempt(NamedTuple):
    id: str
    operation_id: str
    step: int
    attempt: int
    provider: str
    model: str
    configuration_digest: str
    status: AttemptStatus = "pending"
    entry_id: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()  # (toolCallId, name) of the settled entry
    error: AttemptError | None = None
    retryable: bool | None = None
    started_at: int = 0  # epoch ms of the stepAttempt
    ended_at: int | None = None  # of the settled entry or attemptFailed

    def settled(
        self, entry_id: str, ended_at: int, tool_calls: tuple[tuple[str, str], ...] = ()
    ) -> Attempt:
        """This attempt settled by the entry `entry_id` (register row "record-updates")."""
        return _new(Attempt, (*self[:7], "settled", entry_id, tool_calls, *self[10:13], ended_at))


class ToolIntent(NamedTuple):
    id: str
    operation_id: str
    attempt_id: str
    tool_call_id: str
    tool: ToolIdentity
    arguments: dict[str, Any]
    replay_policy: ReplayPolicy
    environment_identity: str
    replay_key: str
    result_entry_id: str
    status: IntentStatus = "pending"

    def ended(self, status: ToolOutcome) -> ToolIntent:
        """This intent with its result's outcome (register row "record-updates")."""
        return _new(ToolIntent, (*self[:10], status))


# The fields the update methods above build by position.
assert Operation._fields[5:9] == (
    "pending_attempts",
    "pending_intents",
    "unanswered_tool_calls",
    "answered_tool_calls",
)
assert Attempt._fields[7:10] == ("status", "entry_id", "tool_calls")
assert Attempt._fields[13:] == ("ended_at",)
assert ToolIntent._fields[10:] == ("status",)


class Restore(NamedTuple):
    """A `fileRestore` record (docs/spec.md §17): few, so kept whole."""

    operation_id: str
    path: str
    from_: str | None
    from_mode: int | None
    to: str | None
    to_mode: int | None


class Spend(NamedTuple):
    """What a run's chain spent (docs/spec.md §4); in the tables, what one run and the
    compactions after it spent."""

    cost: float  # USD, the sum of reported costs
    unknown: int  # attempts and tools whose cost is unknown (no usage, or cost null)
    operations: int  # operations counted (1 for a run never resumed nor compacted)


class Violation(TinyAgentError):
    """An invariant a fact breaks; the caller adds where (line or transaction index)."""


class Kernel(NamedTuple):
    """A `kernelOpened` record (docs/spec.md §9), and where it stands in the file: what
    was committed before it (entries, tool intents, runs), counted when it was applied."""

    id: str
    opened_at: int  # epoch ms of the record
    pid: int
    host: str
    started_at: int  # epoch ms: when its process started
    kernel_id: str | None
    notebook: str | None
    entries_before: int
    intents_before: int
    operations_before: int
    notice_id: str | None = None  # its kernelNotice entry, once the model was told

    def same_process(self, other: Kernel) -> bool:
        return (self.pid, self.host, self.started_at) == (
            other.pid,
            other.host,
            other.started_at,
        )


class LearnedWindow(NamedTuple):
    """The newest `contextWindow` record of one (base URL, model): its tokens (None:
    forgotten), where they came from, and the record's fact id."""

    tokens: int | None
    source: WindowSource
    fact_id: str


_MISSING: Any = object()


# The records `Tables.row` builds from a payload: those made once per run, kernel or
# learned window. An Attempt and a ToolIntent (one per model request and tool call, on
# every load) are built field by field: a getattr and a keyword per field made a 10k-fact
# open ~5% slower.
R = TypeVar("R", Operation, Kernel, LearnedWindow)


@functools.cache
def _copied(fields: tuple[str, ...], payload: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """(record field, payload field) of each payload field whose snake_case name is one
    of a record's `fields`."""
    pairs = ((re.sub("([A-Z])", r"_\1", name).lower(), name) for name in payload.model_fields)
    return tuple((mine, theirs) for mine, theirs in pairs if mine in fields)


class Savepoint(NamedTuple):
    last_seq: int
    open_operation_id: str | None
    last_cut: int | None
    system_prompt: str | None
    totals: UsageTotals  # never mutated during a commit (see `Tables.add_usage`)
    head: tuple[str | None, str | None, bool, int]


@dataclass(slots=True)
class Tables:
    """Everything the invariants need, written by the reducer.

    During a commit every write through `put` is logged, so a transaction that fails
    half-way (a refused fact, a failed write) is rolled back exactly; on load nothing is
    logged (a failure discards the whole state anyway).
    """

    ids: dict[str, IdRole] = field(default_factory=dict)
    entries: dict[str, EntryFact] = field(default_factory=dict)
    operations: dict[str, Operation] = field(default_factory=dict)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    intents: dict[str, ToolIntent] = field(default_factory=dict)
    intent_by_call: dict[tuple[str, str], str] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)  # target id -> its usage
    consumed_inputs: dict[str, str] = field(default_factory=dict)
    # Entries committed while an assistant entry's tool calls were still unanswered in
    # the open operation: entry id -> (operation id, its answered_tool_calls then). A
    # compaction may cut at one of these only once that operation finished without
    # answering another call: calls that never started never get a result (the context
    # answers them "not run"). Entries outside such windows cost nothing here.
    open_call_entries: dict[str, tuple[str, int]] = field(default_factory=dict)
    # (base URL, model) -> the window the session learned for it (docs/spec.md §8).
    windows: dict[tuple[str, str], LearnedWindow] = field(default_factory=dict)
    # perf: register row "budget-follow" (docs/benchmarks.md)
    # Each run's spend, the compactions after it included (`billed_to`), kept as facts
    # apply so a budget check reads a few rows, not the ledger (docs/spec.md §4).
    spends: dict[str, Spend] = field(default_factory=dict)
    billed_to: dict[str, str] = field(default_factory=dict)  # compaction -> run before it
    # The kernels that opened the session for writing, in file order (the last one is
    # the latest: a notice may only name it).
    kernels: dict[str, Kernel] = field(default_factory=dict)
    transactions: int = 0  # lines after the header, each one transaction
    totals: UsageTotals = field(default_factory=UsageTotals)
    last_seq: int = 0
    open_operation_id: str | None = None
    # The seq of the latest compaction's throughEntryId: a cut never moves back.
    last_cut: int | None = None
    # The content of the latest systemPrompt record (docs/spec.md §7).
    system_prompt: str | None = None
    # The conversation's head (docs/spec.md §17): the entry the next one follows, and the
    # operation the next one follows. Each entry's parent is the one before it in the
    # file, but where a rewind moved the head: those few are kept in `parents` (entry id
    # -> parent, None: the start), so a session without rewinds pays nothing per entry.
    restores: dict[str, Restore] = field(default_factory=dict)  # by fact id, file order
    head: str | None = None
    head_operation: str | None = None
    detached: bool = False  # a rewind moved the head; the next entry records its parent
    rewound_at: int = -1  # the seq of the latest rewind: a request measured before is gone
    parents: dict[str, str | None] = field(default_factory=dict)
    undo: list[tuple[dict[Any, Any], Any, Any]] | None = None
    # One object per value the records repeat (a provider's name, a tool's identity):
    # a line's parse makes its own copy of each, which a long session would keep by the
    # thousand. Never undone: a value a refused commit left here is shared by no one.
    shared: dict[Any, Any] = field(default_factory=dict)

    # perf: register row "shared-values" (docs/benchmarks.md)
    def share(self, value: T) -> T:
        """The one object equal to `value` these tables keep (`value` itself the first
        time)."""
        return self.shared.setdefault(value, value)  # type: ignore[no-any-return]

    def row(self, record: type[R], payload: BaseModel, **own: Any) -> R:
        """A `record` of `payload`: the fields it shares with the payload (by name, in
        snake_case) copied from it, but those given as `own`."""
        values = dict(own)
        for mine, theirs in _copied(record._fields, type(payload)):
            values.setdefault(mine, getattr(payload, theirs))
        return record(**values)

    # perf: register row "undo-log" (docs/benchmarks.md)
    def put(self, table: dict[K, V], key: K, value: V) -> None:
        undo = self.undo
        if undo is not None:
            undo.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    def add_usage(self, usage: Usage) -> None:
        if self.undo is None:
            self.totals.add(usage)
        else:
            # Copy on write, so a rollback only has to put the savepoint's object back
            # and a commit without usage copies nothing.
            totals = self.totals.copy()
            totals.add(usage)
            self.totals = totals

    def copy(self) -> Tables:
        """A copy for a reader to keep: each table copied (its records are immutable)."""
        copied = replace(self, totals=self.totals.copy(), undo=None, shared={})
        for name in (f.name for f in fields(self) if f.name != "shared"):
            value = getattr(self, name)
            if isinstance(value, dict):
                setattr(copied, name, value.copy())
        return copied

    def begin(self) -> Savepoint:
        self.undo = []
        return Savepoint(
            self.last_seq,
            self.open_operation_id,
            self.last_cut,
            self.system_prompt,
            self.totals,
            (self.head, self.head_operation, self.detached, self.rewound_at),
        )

    def commit(self) -> None:
        self.undo = None

    def rollback(self, savepoint: Savepoint) -> None:
        for table, key, old in reversed(self.undo or ()):
            if old is _MISSING:
                del table[key]
            else:
                table[key] = old
        self.undo = None
        self.last_seq = savepoint.last_seq
        self.open_operation_id = savepoint.open_operation_id
        self.last_cut = savepoint.last_cut
        self.system_prompt = savepoint.system_prompt
        self.totals = savepoint.totals
        self.head, self.head_operation, self.detached, self.rewound_at = savepoint.head

    def entry_path(self) -> list[str]:
        """The entry ids from the start to the head, in file order (docs/spec.md §17)."""
        if not self.parents and not self.detached:
            return list(self.entries)
        order = list(self.entries)
        index = {entry_id: i for i, entry_id in enumerate(order)}
        path: list[str] = []
        current = self.head
        while current is not None:
            i = index[current]
            # back through the file until an entry a rewind gave another parent
            while order[i] not in self.parents and i > 0:
                path.append(order[i])
                i -= 1
            path.append(order[i])
            current = self.parents.get(order[i])
        path.reverse()
        return path

    def operation_path(self) -> list[Operation]:
        """The operations from the first to the head, in file order: those a rewind left
        behind, and rewinds themselves, are not on it."""
        path: list[Operation] = []
        current = self.head_operation
        while current is not None:
            op = self.operations[current]
            path.append(op)
            current = op.parent
        path.reverse()
        return path
