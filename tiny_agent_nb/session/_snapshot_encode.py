"""`Tables` -> a snapshot's body (JSON, then the binary section), as `_snapshot_codec`
decodes it (its layout is described there). The writer's side: it runs at open and
close, not on a resume.
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import is_, ne, sub
from typing import Any

from . import _snapshot_codec as codec
from ._snapshot_columns import TYPECODES
from ._tables import Attempt, Tables, ToolIntent, UsageTotals

ROLE_CODES = {role: code for code, role in codec.ROLES.items()}
TYPE_CODES = {entry_type: code for code, entry_type in codec.TYPES.items()}


def _runs(values: Sequence[Any]) -> tuple[list[Any], list[int]]:
    # A run holds identical values, and True == 1 == 1.0, 0.0 == -0.0 in Python: values
    # of one type that is not float are compared as they are, others by (type, repr).
    # Where a run starts is found in C.
    if not values:
        return [], []
    kinds = set(map(type, values))
    plain = len(kinds) == 1 and float not in kinds
    keys = values if plain else list(zip(map(type, values), map(repr, values), strict=True))
    starts = [0, *compress(range(1, len(keys)), map(ne, keys[1:], keys[:-1]))]
    counts = list(map(sub, [*starts[1:], len(keys)], starts))
    return list(map(values.__getitem__, starts)), counts


class _Binary:
    """The body's binary section: integer columns as little-endian arrays, and the ids."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, data: bytes) -> list[int]:
        """[offset, size] of `data`, appended to the section."""
        self.parts.append(data)
        self.size += len(data)
        return [self.size - len(data), len(data)]

    def ints(self, values: Sequence[int]) -> dict[str, list[int]]:
        """{"a": [offset, count, width]}: the values in the narrowest width that holds them."""
        low, high = (min(values), max(values)) if values else (0, 0)
        width = next(
            w for w in (1, 2, 4, 8) if -(1 << (8 * w - 1)) <= low <= high < 1 << (8 * w - 1)
        )
        packed = array(TYPECODES[width], values)
        if sys.byteorder == "big":
            packed.byteswap()
        offset, _ = self.add(packed.tobytes())
        return {"a": [offset, len(values), width]}


def _column(values: Sequence[Any], binary: _Binary) -> list[Any] | dict[str, list[Any]]:
    """A plain list, or for integers that fit in 64 bits their array in the binary
    section; or {"v": values, "n": counts} when runs at least halve it; or, for integers
    that grow by steady amounts (ids' indexes, line numbers, steps), the runs of their
    differences: {"d": differences, "n": counts}."""
    plain: list[Any] = list(values)
    runs: list[Any] = plain
    best: list[Any] | dict[str, list[Any]] = plain
    # Counting value changes in C first spares the grouping of a column without runs
    # (1 == True == 1.0 only ever undercounts them: the exact runs are made below).
    if 2 * _changes(values) < len(values):
        runs, counts = _runs(values)
        if 2 * len(runs) <= len(values):
            best = {"v": runs, "n": counts}
    if values and set(map(type, values)) == {int}:
        deltas = list(map(sub, values, (0, *values[:-1])))
        if 2 * _changes(deltas) < len(values):
            deltas, delta_counts = _runs(deltas)
            if 2 * len(deltas) <= len(values) and len(deltas) < len(runs):
                best = {"d": deltas, "n": delta_counts}
        if best is plain and min(values) >= -(1 << 63) and max(values) < 1 << 63:
            best = binary.ints(values)
    return best


def _changes(values: Sequence[Any]) -> int:
    return sum(map(ne, values[1:], values[:-1]))


class _Strings:
    """The string table: the session's ids, then every other string once; None is -1."""

    def __init__(self, ids: Sequence[str], binary: _Binary) -> None:
        self.binary = binary
        self.strings: list[str] = []
        self.index: dict[str | None, int] = {s: i for i, s in enumerate(ids)}
        self.size = len(self.index)
        self.index[None] = -1

    def ref(self, value: str | None) -> int:
        found = self.index.get(value)
        if found is None:
            assert value is not None
            found = self.index[value] = self.size
            self.size += 1
            self.strings.append(value)
        return found

    def col(self, values: Iterable[str | None]) -> list[Any] | dict[str, list[Any]]:
        values = list(values)
        refs = list(map(self.index.get, values))
        if None in refs:  # strings not in the table yet: each added once, then looked up
            for new in dict.fromkeys(compress(values, map(is_, refs, repeat(None)))):
                self.ref(new)
            refs = list(map(self.index.get, values))
        return _column(refs, self.binary)


def _fields(records: Sequence[tuple[Any, ...]], width: int) -> list[tuple[Any, ...]]:
    return list(zip(*records, strict=True)) if records else [() for _ in range(width)]


def encode_tables(t: Tables) -> tuple[bytes, bytes] | None:
    """The body of a snapshot of `t`: its JSON and its binary section. None if the ids
    cannot be joined in ASCII (never for ids the reducer accepted: they are UUIDv7 text)."""
    ids = list(t.ids)
    joined = ",".join(ids)
    if any("," in i for i in ids) or "" in ids or not joined.isascii():
        return None
    binary = _Binary()
    s = _Strings(ids, binary)

    def col(values: Sequence[Any]) -> list[Any] | dict[str, list[Any]]:
        return _column(values, binary)

    entries = _fields(list(t.entries.values()), 3)
    a = _fields(list(t.attempts.values()), len(Attempt._fields))
    i = _fields(list(t.intents.values()), len(ToolIntent._fields))
    # Keyed by their fields: each intent holds its own equal copy, whose pydantic
    # __eq__ and __hash__ would run for each.
    tools: dict[tuple[str, str, str], int] = {}
    tool_refs = [
        tools.setdefault((tool.name, tool.version, tool.source), len(tools)) for tool in i[4]
    ]
    usage = list(t.usage.values())  # rows: attemptId, toolStartedId, counts..., cost
    body = {
        "version": codec.SNAPSHOT_VERSION,
        "roles": col([ROLE_CODES[r] for r in t.ids.values()]),
        "entries": [
            s.col(t.entries),
            *(col(c) for c in entries[:2]),
            col([TYPE_CODES[x] for x in entries[2]]),
        ],
        "operations": [
            [
                s.ref(op.id),
                s.ref(op.input_entry_id),
                s.ref(op.resumes_operation_id),
                *op[1:3],
                *op[5:12],
                None if op.options is None else op.options.model_dump(),
                op.cell_id,
                s.ref(op.replays_operation_id),
            ]
            for op in t.operations.values()
        ],
        "attempts": [
            *(s.col(c) for c in a[:2]),
            *(col(c) for c in a[2:4]),
            *(s.col(c) for c in a[4:9]),
            col([len(calls) for calls in a[9]]),
            s.col(part for calls in a[9] for call in calls for part in call),
            [[row, e.kind, e.message, e.status] for row, e in enumerate(a[10]) if e is not None],
            *(col(c) for c in a[11:]),
        ],
        "intents": [
            *(s.col(c) for c in i[:4]),
            col(tool_refs),
            list(i[5]),
            *(s.col(c) for c in i[6:]),
        ],
        "tools": [list(tool) for tool in tools],
        "usage": [
            col(["a" if u[0] is not None else "t" for u in usage]),
            s.col(t.usage),
            *(col([u[k] for u in usage]) for k in range(2, 7)),
        ],
        "consumed": [s.col(t.consumed_inputs), s.col(t.consumed_inputs.values())],
        "openCalls": [
            s.col(t.open_call_entries),
            s.col(op for op, _ in t.open_call_entries.values()),
            col([answered for _, answered in t.open_call_entries.values()]),
        ],
        "windows": [
            [s.ref(url), s.ref(model), w.tokens, w.source, s.ref(w.fact_id)]
            for (url, model), w in t.windows.items()
        ],
        "kernels": [
            [
                s.ref(k.id),
                k.opened_at,
                k.pid,
                s.ref(k.host),
                k.started_at,
                s.ref(k.kernel_id),
                s.ref(k.notebook),
                k.entries_before,
                k.intents_before,
                k.operations_before,
                s.ref(k.notice_id),
            ]
            for k in t.kernels.values()
        ],
        "totals": _totals(t.totals),
        "lastSeq": t.last_seq,
        "openOperation": s.ref(t.open_operation_id),
        "lastCut": None if t.last_cut is None else list(t.last_cut),
        "systemPrompt": None if t.system_prompt is None else list(t.system_prompt),
        "lineSizes": col(t.lines.sizes()),
        "ids": binary.add(joined.encode("ascii")),
        "strings": s.strings,
    }
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return text, b"".join(binary.parts)


def _totals(u: UsageTotals) -> list[int | float]:
    return [
        u.input_tokens,
        u.output_tokens,
        u.reasoning_tokens,
        u.cached_input_tokens,
        u.cost,
        u.priced,
        u.unpriced,
    ]
