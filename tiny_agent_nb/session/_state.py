"""SessionState: what a session file says, reduced into lookup tables.

The tables are plain dicts of small frozen records. The reducer replaces a record when
its status changes instead of mutating it, so `SessionState.copy()` is a cheap shallow
copy and a snapshot never changes under its reader.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._models import (
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


@dataclass(frozen=True, slots=True)
class Operation:
    id: str
    kind: Literal["run", "resume"]
    status: OperationStatus
    started_fact_id: str
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


@dataclass(frozen=True, slots=True)
class Attempt:
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


@dataclass(frozen=True, slots=True)
class ToolIntent:
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

    def merge(self, other: UsageTotals) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.cost += other.cost
        self.priced += other.priced
        self.unpriced += other.unpriced

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


@dataclass(slots=True)
class Tables:
    """Everything the invariants need. The reducer writes through this; a transaction
    being checked gets a Tables of ChainMaps layered over the committed one."""

    ids: MutableMapping[str, IdRole] = field(default_factory=dict)
    entries: MutableMapping[str, EntryFact] = field(default_factory=dict)
    operations: MutableMapping[str, Operation] = field(default_factory=dict)
    attempts: MutableMapping[str, Attempt] = field(default_factory=dict)
    intents: MutableMapping[str, ToolIntent] = field(default_factory=dict)
    intent_by_call: MutableMapping[tuple[str, str], str] = field(default_factory=dict)
    usage: MutableMapping[str, UsageFact] = field(default_factory=dict)  # target id -> usage
    consumed_inputs: MutableMapping[str, str] = field(default_factory=dict)
    facts: list[Fact] = field(default_factory=list)
    totals: UsageTotals = field(default_factory=UsageTotals)
    last_seq: int = 0
    open_operation_id: str | None = None


class SessionState:
    """The reduction of a session file. Read-only for its users."""

    def __init__(self, path: str, header: Header, tables: Tables | None = None) -> None:
        self.path = path
        self.header = header
        self.tables = tables if tables is not None else Tables()
        self.transaction_count = 0
        self.torn_tail_bytes = 0

    # -- views -------------------------------------------------------------
    @property
    def last_seq(self) -> int:
        return self.tables.last_seq

    @property
    def open_operation(self) -> Operation | None:
        op_id = self.tables.open_operation_id
        return None if op_id is None else self.tables.operations[op_id]

    @property
    def facts(self) -> list[Fact]:
        return self.tables.facts

    @property
    def entries(self) -> MutableMapping[str, EntryFact]:
        return self.tables.entries

    @property
    def operations(self) -> MutableMapping[str, Operation]:
        return self.tables.operations

    @property
    def attempts(self) -> MutableMapping[str, Attempt]:
        return self.tables.attempts

    @property
    def tool_intents(self) -> MutableMapping[str, ToolIntent]:
        return self.tables.intents

    @property
    def usage(self) -> MutableMapping[str, UsageFact]:
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
            facts=list(t.facts),
            totals=UsageTotals(**{f: getattr(t.totals, f) for f in UsageTotals.__slots__}),
            last_seq=t.last_seq,
            open_operation_id=t.open_operation_id,
        )
        state = SessionState(self.path, self.header, tables)
        state.transaction_count = self.transaction_count
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
