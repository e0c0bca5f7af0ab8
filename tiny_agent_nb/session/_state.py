"""SessionState: what a session file says, reduced into lookup tables.

The tables are plain dicts of small immutable records (NamedTuples: `_replace` costs a
quarter of `dataclasses.replace`, and this is the commit path). The reducer replaces a
record when its status changes instead of mutating it, so `SessionState.copy()` is a cheap shallow
copy, a snapshot never changes under its reader, and undoing a write is putting the
old record back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeVar

from ._models import (
    FACT_ADAPTER,
    FACT_LIST_ADAPTER,
    AttemptError,
    EntryFact,
    Fact,
    Header,
    OperationOutcome,
    ReplayPolicy,
    ToolIdentity,
    ToolOutcome,
    UsageFact,
)

OperationStatus = Literal["open"] | OperationOutcome
AttemptStatus = Literal["pending", "settled", "failed"]
IntentStatus = Literal["pending"] | ToolOutcome
IdRole = Literal["fact", "operation", "reserved"]
K = TypeVar("K")
V = TypeVar("V")


class Operation(NamedTuple):
    id: str
    kind: Literal["run", "resume"]
    status: OperationStatus
    input_entry_id: str | None
    resumes_operation_id: str | None
    pending_attempts: int = 0
    pending_intents: int = 0
    # Tool calls of settled assistant entries that have no result yet: a provider refuses
    # a conversation in which a tool call has no tool message, so no attempt may start
    # while this is non-zero.
    unanswered_tool_calls: int = 0
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

    def add(self, fact: UsageFact) -> None:
        u = fact.usage
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


@dataclass(slots=True)
class Savepoint:
    last_seq: int
    open_operation_id: str | None
    totals: UsageTotals


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
    usage: dict[str, UsageFact] = field(default_factory=dict)  # target id -> usage
    consumed_inputs: dict[str, str] = field(default_factory=dict)
    # The transaction lines as written. Bytes are invisible to the cyclic GC, so history
    # is kept here rather than as ~7 tracked objects per fact: record facts are not kept
    # as objects at all (the tables above hold what the invariants and views need).
    lines: list[bytes] = field(default_factory=list)
    totals: UsageTotals = field(default_factory=UsageTotals)
    last_seq: int = 0
    open_operation_id: str | None = None
    undo: list[tuple[dict[Any, Any], Any, Any]] | None = None

    def put(self, table: dict[K, V], key: K, value: V) -> None:
        undo = self.undo
        if undo is not None:
            undo.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    def begin(self) -> Savepoint:
        self.undo = []
        return Savepoint(self.last_seq, self.open_operation_id, self.totals.copy())

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
    def entries(self) -> Mapping[str, EntryFact]:
        return self.tables.entries

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
    def usage(self) -> Mapping[str, UsageFact]:
        return self.tables.usage

    @property
    def totals(self) -> UsageTotals:
        return self.tables.totals

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
            lines=list(t.lines),
            totals=t.totals.copy(),
            last_seq=t.last_seq,
            open_operation_id=t.open_operation_id,
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


def facts_of(lines: list[bytes]) -> list[Fact]:
    facts: list[Fact] = []
    for line in lines:
        if line[:1] == b"[":
            facts.extend(FACT_LIST_ADAPTER.validate_json(line))
        else:
            facts.append(FACT_ADAPTER.validate_json(line))
    return facts
