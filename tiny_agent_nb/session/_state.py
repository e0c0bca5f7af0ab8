"""SessionState: what a session file says, reduced into lookup tables.

The tables are plain dicts of small immutable records (NamedTuples: `_replace` costs a
quarter of `dataclasses.replace`, and this is the commit path). The reducer replaces a
record when its status changes instead of mutating it, so `SessionState.copy()` is a cheap shallow
copy, a snapshot never changes under its reader, and undoing a write is putting the
old record back.

History itself stays as the transaction lines' bytes. Entries are found through an
`EntrySlot` (line, position, type) and decoded when read: a kept pydantic fact is ~10
objects the cyclic GC rescans for the life of the kernel and a second copy of its text;
bytes and tuples of atoms are neither.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeVar

from ._models import (
    FACT_ADAPTER,
    FACT_LIST_ADAPTER,
    AttemptError,
    EntryFact,
    Fact,
    Header,
    OperationKind,
    OperationOutcome,
    ReplayPolicy,
    ToolIdentity,
    ToolOutcome,
    Usage,
)

OperationStatus = Literal["open"] | OperationOutcome
AttemptStatus = Literal["pending", "settled", "failed"]
IntentStatus = Literal["pending"] | ToolOutcome
IdRole = Literal["fact", "operation", "reserved"]
EntryType = Literal["user", "assistant", "toolResult", "compaction"]
# perf: register row "history-bytes" (docs/benchmarks.md)
# (index in `Tables.lines`, position in that transaction, entry type). A plain tuple of
# atoms, which the cyclic GC stops tracking after its first look (a NamedTuple it never
# does).
EntrySlot = tuple[int, int, EntryType]
K = TypeVar("K")
V = TypeVar("V")


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


@dataclass(slots=True)
class UsageTotals:
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    cost: float = 0.0
    priced: int = 0  # usage facts that reported a cost
    unpriced: int = 0  # usage facts whose cost is unknown (null)

    def add(self, u: Usage) -> None:
        self.input_tokens += u.inputTokens
        self.output_tokens += u.outputTokens
        self.reasoning_tokens += u.reasoningTokens
        self.cached_input_tokens += u.cachedInputTokens
        if u.cost is None:
            self.unpriced += 1
        else:
            self.cost += u.cost
            self.priced += 1

    def copy(self) -> UsageTotals:
        return UsageTotals(
            self.input_tokens,
            self.output_tokens,
            self.reasoning_tokens,
            self.cached_input_tokens,
            self.cost,
            self.priced,
            self.unpriced,
        )

    @property
    def known_cost(self) -> float | None:
        """Sum of reported costs; None when usage exists but no provider reported a cost."""
        if self.priced:
            return round(self.cost, 12)
        return None if self.unpriced else 0

    def summary(self) -> dict[str, Any]:
        return {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "reasoningTokens": self.reasoning_tokens,
            "cachedInputTokens": self.cached_input_tokens,
            "cost": self.known_cost,
        }


_MISSING: Any = object()


class Savepoint(NamedTuple):
    last_seq: int
    open_operation_id: str | None
    last_cut: tuple[int, int] | None
    totals: UsageTotals  # never mutated during a commit (see `Tables.add_usage`)


@dataclass(slots=True)
class Tables:
    """Everything the invariants need, written by the reducer.

    During a commit every write through `put` is logged, so a transaction that fails
    half-way (a refused fact, a failed write) is rolled back exactly; on load nothing is
    logged (a failure discards the whole state anyway).
    """

    ids: dict[str, IdRole] = field(default_factory=dict)
    entries: dict[str, EntrySlot] = field(default_factory=dict)
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
    # The transaction lines, the only copy of history's content: as split from the file
    # on load, as written (LF included, not worth a copy to cut) on commit.
    lines: list[bytes] = field(default_factory=list)
    totals: UsageTotals = field(default_factory=UsageTotals)
    last_seq: int = 0
    open_operation_id: str | None = None
    # (line, position) of the latest compaction's throughEntryId: a cut never moves back.
    last_cut: tuple[int, int] | None = None
    undo: list[tuple[dict[Any, Any], Any, Any]] | None = None

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
            # perf: register row "usage-copy-on-write" (docs/benchmarks.md).
            # Copy on write, so a rollback only has to put the savepoint's object back
            # and a commit without usage copies nothing.
            totals = self.totals.copy()
            totals.add(usage)
            self.totals = totals

    def begin(self) -> Savepoint:
        self.undo = []
        return Savepoint(self.last_seq, self.open_operation_id, self.last_cut, self.totals)

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
        self.totals = savepoint.totals


class SessionState:
    """The reduction of a session file. Read-only for its users."""

    def __init__(self, path: str, header: Header, tables: Tables | None = None) -> None:
        self.path = path
        self.header = header
        self.tables = tables if tables is not None else Tables()
        self.torn_tail_bytes = 0

    # -- views -------------------------------------------------------------
    @property
    def transaction_count(self) -> int:
        """Lines after the header: one per committed transaction."""
        return len(self.tables.lines)

    @property
    def last_seq(self) -> int:
        return self.tables.last_seq

    @property
    def open_operation(self) -> Operation | None:
        op_id = self.tables.open_operation_id
        return None if op_id is None else self.tables.operations[op_id]

    @property
    def facts(self) -> list[Fact]:
        """Every committed fact, decoded from the transaction lines: O(history), for tools
        and tests; the views above are what a running notebook reads."""
        return facts_of(self.tables.lines)

    @property
    def entries(self) -> EntryView:
        """Entries in commit order; each is decoded from its line when read."""
        return EntryView(self.tables.entries, self.tables.lines)

    @property
    def operations(self) -> Mapping[str, Operation]:
        return self.tables.operations

    @property
    def attempts(self) -> Mapping[str, Attempt]:
        return self.tables.attempts

    @property
    def tool_intents(self) -> Mapping[str, ToolIntent]:
        return self.tables.intents

    @property
    def usage(self) -> Mapping[str, Usage]:
        """The usage of each stepAttempt or toolStarted that reported one, by its id."""
        return self.tables.usage

    @property
    def totals(self) -> UsageTotals:
        return self.tables.totals

    def usage_by_operation(self) -> dict[str, UsageTotals]:
        """The usage ledger summed per operation (attempts' and tool intents' usage), in
        file order; together the sums are exactly `totals`."""
        t = self.tables
        by_operation = {op_id: UsageTotals() for op_id in t.operations}
        for target, usage in t.usage.items():
            attempt = t.attempts.get(target)
            owner = attempt.operation_id if attempt else t.intents[target].operation_id
            by_operation[owner].add(usage)
        return by_operation

    def copy(self) -> SessionState:
        t = self.tables
        tables = Tables(
            ids=dict(t.ids),
            entries=dict(t.entries),
            operations=dict(t.operations),
            attempts=dict(t.attempts),
            intents=dict(t.intents),
            intent_by_call=dict(t.intent_by_call),
            usage=dict(t.usage),
            consumed_inputs=dict(t.consumed_inputs),
            open_call_entries=dict(t.open_call_entries),
            lines=list(t.lines),
            totals=t.totals.copy(),
            last_seq=t.last_seq,
            open_operation_id=t.open_operation_id,
            last_cut=t.last_cut,
        )
        state = SessionState(self.path, self.header, tables)
        state.torn_tail_bytes = self.torn_tail_bytes
        return state

    def summary(self) -> dict[str, Any]:
        """The canonical, language-neutral summary the conformance fixtures compare."""
        t = self.tables
        return {
            "sessionId": self.header.id,
            "version": self.header.version,
            "lastSeq": t.last_seq,
            "transactionCount": self.transaction_count,
            "tornTailBytes": self.torn_tail_bytes,
            "entries": list(t.entries),
            "operations": [
                {"id": op.id, "kind": op.kind, "status": op.status} for op in t.operations.values()
            ],
            "attempts": [
                {"id": a.id, "operationId": a.operation_id, "status": a.status}
                for a in t.attempts.values()
            ],
            "toolIntents": [
                {
                    "id": i.id,
                    "tool": i.tool.name,
                    "replayPolicy": i.replay_policy,
                    "status": i.status,
                }
                for i in t.intents.values()
            ],
            "usage": t.totals.summary(),
        }

    def __repr__(self) -> str:
        return (
            f"<SessionState {self.path!r} lastSeq={self.last_seq} "
            f"transactions={self.transaction_count} operations={len(self.operations)}>"
        )


def decode_line(line: bytes) -> list[Fact]:
    """The facts of one transaction line (raises pydantic's ValidationError)."""
    if line[:1] == b"[":
        return FACT_LIST_ADAPTER.validate_json(line)
    return [FACT_ADAPTER.validate_json(line)]


def facts_of(lines: list[bytes]) -> list[Fact]:
    facts: list[Fact] = []
    for line in lines:
        facts.extend(decode_line(line))
    return facts


class EntryView(Mapping[str, EntryFact]):
    """`SessionState.entries`: a read-only mapping that decodes entries on access.

    Lines were validated when they were committed or loaded, so decoding one cannot fail.
    """

    __slots__ = ("_lines", "_slots")

    def __init__(self, slots: dict[str, EntrySlot], lines: list[bytes]) -> None:
        self._slots = slots
        self._lines = lines

    def __getitem__(self, entry_id: str) -> EntryFact:
        line, position, _ = self._slots[entry_id]
        return _as_entry(decode_line(self._lines[line])[position])

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._slots

    def type_of(self, entry_id: str) -> EntryType | None:
        """The entry's type without decoding it (None: no such entry)."""
        slot = self._slots.get(entry_id)
        return None if slot is None else slot[2]

    def last(self) -> EntryFact | None:
        """The most recent entry (cheap: one line is decoded)."""
        if not self._slots:
            return None
        return self[next(reversed(self._slots))]


def _as_entry(fact: Fact) -> EntryFact:
    assert isinstance(fact, EntryFact)  # a slot only ever points at an entry fact
    return fact
