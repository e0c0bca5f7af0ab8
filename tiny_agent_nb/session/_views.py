"""The read-only mappings a SessionState hands out over its tables: entries decoded from
their lines when read, usage made when read (and the rows out of range left out)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from ._framing import parse_transaction
from ._lines import Lines
from ._models import EntryFact, Fact, Usage
from ._tables import EntrySlot, EntryType, UsageRow, row_in_range, usage_of


def facts_of(lines: Iterable[bytes]) -> list[Fact]:
    facts: list[Fact] = []
    for line in lines:
        facts.extend(parse_transaction(line))
    return facts


class EntryView(Mapping[str, EntryFact]):
    """`SessionState.entries`: a read-only mapping that decodes entries on access.

    Lines were validated when they were committed or loaded, so decoding one cannot fail.
    """

    __slots__ = ("_lines", "_slots")

    def __init__(self, slots: dict[str, EntrySlot], lines: Lines) -> None:
        self._slots = slots
        self._lines = lines

    def __getitem__(self, entry_id: str) -> EntryFact:
        line, position, _ = self._slots[entry_id]
        return _as_entry(parse_transaction(self._lines[line])[position])

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


class UsageView(Mapping[str, Usage]):
    """`SessionState.usage`: a read-only mapping that makes each Usage when read, and
    leaves out the rows out of range (`row_in_range`): those read as no usage."""

    __slots__ = ("_rows",)

    def __init__(self, rows: dict[str, UsageRow]) -> None:
        self._rows = rows

    def __getitem__(self, target: str) -> Usage:
        row = self._rows[target]
        if not row_in_range(row):
            raise KeyError(target)
        return usage_of(row)

    def __iter__(self) -> Iterator[str]:
        return (target for target, row in self._rows.items() if row_in_range(row))

    def __len__(self) -> int:
        return sum(1 for row in self._rows.values() if row_in_range(row))

    def __contains__(self, target: object) -> bool:
        row = self._rows.get(target) if isinstance(target, str) else None
        return row is not None and row_in_range(row)


def _as_entry(fact: Fact) -> EntryFact:
    assert isinstance(fact, EntryFact)  # a slot only ever points at an entry fact
    return fact
