"""The ledger a context projection keeps: the server's input token count of the newest
settled attempt, and the bytes of the request it counted (docs/session-format.md §2.4,
docs/spec.md §4)."""

from __future__ import annotations

from collections.abc import Sequence

from ..session import (
    AssistantEntry,
    AttemptFailed,
    CompactionEntry,
    Fact,
    RecordFact,
    SessionState,
    StepAttempt,
    UsageFact,
    usage_in_range,
)


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
class LastRequest:
    """`last_input_tokens` kept from the facts as they commit, O(1) per fact. It relies
    on the reducer's one pending attempt at a time: attempts settle in the order they
    start, and usage names an attempt at most once."""

    __slots__ = ("_pending", "_pending_bytes", "_pending_tokens", "_settled", "bytes", "tokens")

    def __init__(self) -> None:
        self.tokens: int | None = None
        # The projection's bytes when that attempt was sent (None: not by this process).
        self.bytes: int | None = None
        self._pending_bytes: int | None = None
        self._settled: str | None = None  # newest settled attempt, if an assistant settled it
        self._pending: str | None = None  # the attempt that has neither settled nor failed
        self._pending_tokens: int | None = None  # its usage, committed before it settled

    @classmethod
    def from_state(cls, state: SessionState) -> LastRequest:
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
                    continue  # a tool's usage, or none (out of range: docs/spec.md §4)
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
