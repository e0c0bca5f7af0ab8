"""What a commit does around its write: the facts built and checked (docs/session-format.md §6.1),
and whether power mode syncs them before the commit returns (§6.2)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pydantic import ValidationError

from ._exceptions import InvalidTransactionError
from ._facts import NewFact
from ._framing import describe_validation_error
from ._ids import is_uuid7, new_id
from ._models import Fact, RecordFact
from ._reducer import apply_fact
from ._tables import Tables, Violation


def build_transaction(tables: Tables, facts: Sequence[NewFact], at: int) -> list[Fact]:
    """The facts of one commit, each given its seq, id and `at`, checked against every
    rule (docs/session-format.md §4) and applied to `tables` in order (the caller rolls them back
    if the line is not written). InvalidTransactionError names the fact that broke one."""
    built: list[Fact] = []
    for index, new in enumerate(facts):
        fact_id = new.id if new.id is not None else new_id()
        try:
            # The envelope model checks a reserved id's UUIDv7 pattern; nothing else
            # in it can be wrong (seq, at and the validated payload come from here).
            fact = new.build(seq=tables.last_seq + 1, fact_id=fact_id, at=at)
        except ValidationError as exc:
            reason = describe_validation_error(exc)
            if not is_uuid7(fact_id):
                reason = f"id {fact_id!r} is not a UUIDv7"
            raise InvalidTransactionError(reason, index=index) from None
        try:
            apply_fact(tables, fact, index)
        except Violation as exc:
            raise InvalidTransactionError(str(exc), index=index) from None
        built.append(fact)
    return built


def syncs_at_once(facts: Sequence[Fact]) -> bool:
    """Whether power mode syncs this transaction before `commit` returns (docs/session-format.md
    §6.2): when it holds any record but `attemptFailed`, i.e. precedes an effect (a
    `stepAttempt`, an intent) or starts, aborts or ends an operation. Entries, usage and
    `attemptFailed` record what came of an effect: a power cut that loses them leaves the
    attempt or intent pending, settled as after a crash during the effect (docs/spec.md §2.1). A
    `kernelOpened` precedes no effect: whatever its kernel does next starts with a
    transaction that syncs, and carries it to the disk (docs/spec.md §9). A record type added later
    syncs unless it is named here."""
    for fact in facts:  # a loop, not any() over a generator: this runs on every commit
        if isinstance(fact, RecordFact) and fact.record.type not in _UNSYNCED_RECORDS:
            return True
    return False


_UNSYNCED_RECORDS = frozenset({"attemptFailed", "kernelOpened"})


Subscriber = Callable[[Sequence[Fact]], None]
log = logging.getLogger("tiny_agent_nb.session")


class Subscribers:
    """Who is told of each commit's facts, in commit order (`SessionStore.subscribe`)."""

    def __init__(self) -> None:
        self._callbacks: list[Subscriber] = []

    def add(self, callback: Subscriber) -> Callable[[], None]:
        """Adds `callback`; returns what removes it."""
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    def notify(self, facts: list[Fact]) -> None:
        for callback in list(self._callbacks):
            try:
                callback(facts)
            except Exception:
                # The facts are already durable: a failing observer must not make the
                # caller believe the commit failed.
                log.exception("session subscriber %r failed", callback)
