"""The columns of a snapshot body (docs/spec.md §14), checked as they are decoded:
`_snapshot_codec` builds the tables from them, `_snapshot_encode` writes them.

A column is a list of values, {"v": values, "n": counts} for runs of one value,
{"d": differences, "n": counts} for integers growing by steady steps, or {"a": [offset,
count, width]} for little-endian integers in the binary section. Every check raises
SnapshotError, after which the caller reads the session in full.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import accumulate, chain, repeat
from typing import Any, TypeVar

from .._exceptions import TinyAgentError

R = TypeVar("R", bound=tuple[Any, ...])

# The array typecode of each width of the binary section's integers.
TYPECODES = {array(code).itemsize: code for code in "bhilq"}
assert all(width in TYPECODES for width in (1, 2, 4, 8))

Convert = Callable[[list[Any], str], list[Any]]


class SnapshotError(TinyAgentError):
    """A snapshot body that does not decode into tables."""


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SnapshotError(what)


# ---------------------------------------------------------------- decoding


def as_list(value: object, what: str, length: int | None = None) -> list[Any]:
    check(isinstance(value, list), f"{what} is not a list")
    assert isinstance(value, list)
    check(length is None or len(value) == length, f"{what} has the wrong length")
    return value


def typed(*types: type) -> Convert:
    allowed = set(types)

    def convert(values: list[Any], what: str) -> list[Any]:
        if isinstance(values, (array, range)):  # integers by construction
            check(int in allowed, f"{what} holds a value of the wrong type")
            return values.tolist() if isinstance(values, array) else list(values)
        check(set(map(type, values)) <= allowed, f"{what} holds a value of the wrong type")
        return values

    return convert


def codes(codes: dict[str, Any]) -> Convert:
    def convert(values: list[Any], what: str) -> list[Any]:
        check(set(values) <= codes.keys(), f"{what}: an unknown code")
        return list(map(codes.__getitem__, values))

    return convert


INTS = typed(int)


def as_is(values: list[Any], what: str) -> list[Any]:
    """Integers, left in their array if they come in one."""
    return values if isinstance(values, (array, range)) else INTS(values, what)


def sums(deltas: list[int], counts: list[int]) -> range | array[int]:
    """The running sums of `deltas`, each repeated `counts` times: for a column that
    starts somewhere and then grows by one steady step (ids' indexes, line numbers), a
    `range` (its bounds known without a pass) rather than every difference added up."""
    first = step = count = 0
    if len(deltas) == 1:
        first, step, count = deltas[0], deltas[0], counts[0]
    elif len(deltas) == 2 and counts[0] == 1:
        first, step, count = deltas[0], deltas[1], 1 + counts[1]
    if step:
        return range(first, first + step * count, step)
    return array("q", accumulate(chain.from_iterable(map(repeat, deltas, counts))))


INTS_OR_NONE = typed(int, type(None))
_PIECE = 1 << 14


# perf: register row "snapshot-read-map" (docs/benchmarks.md)
def _split_ids(joined: bytes | memoryview, room: int) -> list[str | None]:
    """`joined.decode("ascii").split(",")` ([] for no bytes) and `room` more slots (""),
    decoded a piece at a time: the whole text at once was the load's largest temporary,
    and the hole it left in the C allocator's heap stayed resident."""
    if not joined:
        return [""] * room
    pieces = range(0, len(joined), _PIECE)
    # Counted first, and the list made at its size: grown, it left its old sizes behind.
    count = 1 + sum(bytes(joined[at : at + _PIECE]).count(b",") for at in pieces)
    ids: list[str | None] = [""] * (count + room)
    rest = ""
    filled = 0
    for at in pieces:
        *done, rest = (rest + str(joined[at : at + _PIECE], "ascii")).split(",")
        ids[filled : filled + len(done)] = done
        filled += len(done)
    ids[filled] = rest
    return ids


class Decoder:
    def __init__(self, body: dict[str, Any], binary: bytes | memoryview) -> None:
        self.body = body
        self.binary = binary
        strings = as_list(body.pop("strings", None), "strings")
        check(set(map(type, strings)) <= {str}, "a string is not a string")
        # The ids, the strings, and None (-1: the one negative index allowed, checked per
        # column) in one list, made at its size once: cut back to the ids by `ids()`.
        names = _split_ids(self.span(body.get("ids"), "ids"), len(strings) + 1)
        self.id_count = len(names) - len(strings) - 1
        names[self.id_count : -1] = strings
        names[-1] = None
        self.count = len(names) - 1
        self.names = names
        self.lookup: Callable[[int], str | None] = names.__getitem__

    def ids(self) -> list[str]:
        """The ids, once every column is decoded (the strings are cut off in place)."""
        del self.names[self.id_count :]
        return self.names  # type: ignore[return-value]

    def part(self, name: str, width: int) -> list[Any]:
        return as_list(self.body.pop(name, None), name, width)

    def span(self, raw: object, what: str) -> bytes | memoryview:
        """The bytes at [offset, size] in the binary section."""
        offset, size = INTS(as_list(raw, what, 2), what)
        check(offset >= 0 and size >= 0 and offset + size <= len(self.binary), f"{what}: bad span")
        return self.binary[offset : offset + size]

    def ints(self, raw: object, what: str, length: int) -> array[int]:
        """The array at {"a": [offset, count, width]} in the binary section."""
        offset, count, width = INTS(as_list(raw, what, 3), what)
        check(width in (1, 2, 4, 8) and count == length, f"{what}: a bad array")
        values = array(TYPECODES[width])
        values.frombytes(self.span([offset, count * width], what))
        if sys.byteorder == "big":
            values.byteswap()
        return values

    def column(self, raw: object, what: str, length: int, convert: Convert) -> list[Any]:
        if isinstance(raw, dict) and raw.keys() == {"a"}:
            return convert(self.ints(raw["a"], what, length), what)  # type: ignore[arg-type]
        if isinstance(raw, dict):
            check(raw.keys() in ({"v", "n"}, {"d", "n"}), f"{what}: runs are v or d, and n")
            values = as_list(raw.get("v", raw.get("d")), what)
            counts = INTS(as_list(raw["n"], what, len(values)), what)
            check(not counts or min(counts) > 0, f"{what}: an empty run")
            check(sum(counts) == length, f"{what} has the wrong length")
            if "d" in raw:  # differences: add them up (ints of ints: no type to check)
                return convert(sums(INTS(values, what), counts), what)  # type: ignore[arg-type]
            if len(values) == 1:  # one run: the whole column one value
                return convert(values, what) * length
            return list(chain.from_iterable(map(repeat, convert(values, what), counts)))
        return convert(as_list(raw, what, length), what)

    def length(self, raw: object, what: str) -> int:
        if isinstance(raw, dict) and raw.keys() == {"a"}:
            return int(INTS(as_list(raw["a"], what, 3), what)[1])
        if isinstance(raw, dict):
            return sum(INTS(as_list(raw.get("n"), what), what))
        return len(as_list(raw, what))

    def refs(self, raw: object, what: str, length: int, *, nullable: bool = False) -> list[Any]:
        least = -1 if nullable else 0

        def convert(values: list[Any], what: str) -> list[Any]:
            if isinstance(values, range):
                ends = [values[0], values[-1]] if values else []
            else:
                if not isinstance(values, array):
                    INTS(values, what)
                ends = [min(values), max(values)] if values else []
            if ends:
                check(least <= min(ends) and max(ends) < self.count, f"{what}: bad index")
            return list(map(self.lookup, values))

        return self.column(raw, what, length, convert)


def records(cls: type[R], columns: Sequence[Iterable[Any]]) -> list[R]:
    return list(map(partial(tuple.__new__, cls), zip(*columns, strict=True)))
