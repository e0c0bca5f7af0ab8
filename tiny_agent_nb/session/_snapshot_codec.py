"""JSON + binary -> `Tables`: the body of a snapshot (docs/spec.md §14); `_snapshot_encode`
writes it.

# perf: register row "snapshot" (docs/benchmarks.md)
Column-wise, so a resume rebuilds each table with a few C-level `map`/`zip` calls rather
than Python code per record: a table is one column per field, a list of values, or
{"v": values, "n": counts} for runs of one value (a run's operation id, the model,
`settled`), or {"d": differences, "n": counts} for integers growing by steady steps (ids'
indexes, line numbers); every string is an index into one string table whose head is the
session's ids, in order, joined by commas (ids are UUIDv7 text: one `str.split` instead of
a JSON string per id); -1 stands for None.

# perf: register row "snapshot-binary" (docs/benchmarks.md)
The body is a JSON text, then a binary section that the JSON points into by [offset,
size]: the ids, as ASCII, and every integer column that runs do not shorten, as
{"a": [offset, count, width]}: `count` little-endian signed integers of `width` bytes (1,
2, 4 or 8), read with one `array.frombytes` (no JSON number parsed, no type to check;
their range is checked with `min`/`max`). Records are rebuilt with `tuple.__new__` on the
NamedTuple class (`_make` without its Python frame); the pydantic values they hold
(`ToolIdentity`, `AttemptError`, `RunOptions`) go through their own strict validators,
usage rows are checked column by column.

Decoding checks everything it can check cheaply: each column has the right length and
its values the right types, each index is in range, each status is one the format knows.
Anything else raises (SnapshotError, or whatever the failing step raises) and the caller
reads the session in full. JSON only: decoding bytes can never run code.
"""

from __future__ import annotations

import hashlib
import json
import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import fields
from functools import partial
from itertools import accumulate, compress, islice, repeat
from operator import ne
from typing import Any, get_args

from ._lines import Lines
from ._records import (
    AttemptError,
    OperationKind,
    ReplayPolicy,
    RunOptions,
    ToolIdentity,
    WindowSource,
)
from ._snapshot_columns import (
    INTS,
    INTS_OR_NONE,
    Decoder,
    as_is,
    as_list,
    check,
    codes,
    records,
    typed,
)
from ._source import Source
from ._tables import (
    Attempt,
    AttemptStatus,
    EntryType,
    IdRole,
    IntentStatus,
    Kernel,
    LearnedWindow,
    Operation,
    OperationStatus,
    Tables,
    ToolIntent,
    UsageRow,
    UsageTotals,
)

# The body's version names the records' layout as well as the format: a field added,
# removed, renamed or moved in a table record makes every snapshot written before
# "another snapshot version" (a full read) without anyone having to remember a bump.
# A change in what a field *means*, or in how a column is encoded, still bumps FORMAT.
# 3: the usage totals leave out a usage fact out of range (docs/spec.md §11); a snapshot
# written before summed it. 4: a window's tokens may be null (forgotten, §17).
SNAPSHOT_FORMAT = 4


def layout_version(
    records: Sequence[type[tuple[Any, ...]]] = (
        Operation,
        Attempt,
        ToolIntent,
        LearnedWindow,
        Kernel,
    ),
) -> str:
    """FORMAT and a digest of the record classes' fields, the usage totals' and rows'."""
    layout = [cls._fields for cls in records]  # type: ignore[attr-defined]
    layout += [[f.name for f in fields(UsageTotals)], get_args(UsageRow)]
    return f"{SNAPSHOT_FORMAT}:{hashlib.sha256(repr(layout).encode()).hexdigest()[:16]}"


SNAPSHOT_VERSION = layout_version()


def _values(literal: object) -> frozenset[str]:
    """The strings a Literal (or a union of Literals) allows."""
    args = get_args(literal)
    return frozenset(a for arg in args for a in (_values(arg) if get_args(arg) else (arg,)))


ROLES: dict[str, IdRole] = {"f": "fact", "o": "operation", "r": "reserved"}
TYPES: dict[str, EntryType] = {
    "u": "user",
    "a": "assistant",
    "t": "toolResult",
    "c": "compaction",
    "k": "kernelNotice",
}
_KINDS = _values(OperationKind)
_OPERATION_STATUSES = _values(OperationStatus)
_ATTEMPT_STATUSES = _values(AttemptStatus)
_INTENT_STATUSES = _values(IntentStatus)
_POLICIES = _values(ReplayPolicy)
_USAGE_KINDS = {"a": True, "t": False}  # names the attempt (else the toolStarted)
_WINDOW_SOURCES = _values(WindowSource)


def parse_body(text: str) -> dict[str, Any]:
    """A snapshot body's JSON text parsed, its version checked. Raises on anything else.

    Apart from `decode_tables` so the caller's text is freed before the tables are built:
    their allocations then reuse its memory instead of landing around it."""
    body = json.loads(text)
    check(isinstance(body, dict), "the body is not an object")
    check(body.get("version") == SNAPSHOT_VERSION, "another snapshot version")
    return body  # type: ignore[no-any-return]


def decode_tables(
    body: dict[str, Any],
    binary: bytes | memoryview,
    source: Source,
    lines_at: tuple[int, int, bytes],
) -> Tables:
    """The tables a snapshot body (`parse_body`'s, and its binary section) describes;
    their lines are those of the session file in `source` from `start` (after the header)
    to `end` (`lines_at` is start, end, blocks), cut where the body's line sizes say,
    checked by `blocks` when read back. Raises on anything malformed."""
    start, end, blocks = lines_at
    d = Decoder(body, binary)
    raw_sizes = body.pop("lineSizes", None)
    length = d.length(raw_sizes, "line sizes")
    # An array is summed as it is: its ints are made one at a time, never all at once.
    sizes = d.column(raw_sizes, "line sizes", length, as_is)
    check(not sizes or min(sizes) > 0, "an empty line")
    ends = array("q", accumulate(sizes, initial=start))
    check(ends[-1] == end, "the lines do not end where the snapshot does")
    lines = Lines(source, ends=ends, blocks=blocks)
    roles = d.column(body.pop("roles", None), "roles", d.id_count, codes(ROLES))

    raw_keys, *raw_slots = d.part("entries", 4)
    n = d.length(raw_keys, "entry ids")
    keys = d.refs(raw_keys, "entry ids", n)
    line_col = d.column(raw_slots[0], "entry lines", n, INTS)
    if line_col:
        check(min(line_col) >= 0 and max(line_col) < len(lines), "an entry past the lines")
    slots = zip(
        line_col,
        d.column(raw_slots[1], "entry positions", n, INTS),
        d.column(raw_slots[2], "entry types", n, codes(TYPES)),
        strict=True,
    )
    entries = dict(zip(keys, slots, strict=True))

    intents, by_call = _intents(d, d.part("intents", 11))
    raw_keys, raw_values = d.part("consumed", 2)
    n = d.length(raw_keys, "consumed inputs")
    consumed = dict(
        zip(d.refs(raw_keys, "consumed", n), d.refs(raw_values, "consumers", n), strict=True)
    )
    raw_keys, raw_ops, raw_counts = d.part("openCalls", 3)
    n = d.length(raw_keys, "open call entries")
    open_calls = dict(
        zip(
            d.refs(raw_keys, "open call entries", n),
            zip(
                d.refs(raw_ops, "open call operations", n),
                d.column(raw_counts, "open call counts", n, INTS),
                strict=True,
            ),
            strict=True,
        )
    )
    totals = typed(int, float)(as_list(body.get("totals"), "totals", 7), "totals")
    check(all(type(x) is int for x in totals[:4] + totals[5:]), "a total is not a count")
    last_seq = body.get("lastSeq")
    check(type(last_seq) is int, "lastSeq is not an int")
    assert isinstance(last_seq, int)
    last_cut = body.get("lastCut")
    if last_cut is not None:
        last_cut = tuple(INTS(as_list(last_cut, "lastCut", 2), "lastCut"))
    system_prompt = body.get("systemPrompt")
    if system_prompt is not None:
        system_prompt = tuple(INTS(as_list(system_prompt, "systemPrompt", 2), "systemPrompt"))
        check(0 <= system_prompt[0] < len(lines), "systemPrompt names no line")
    tables = Tables(
        entries=entries,
        operations=_operations(d, as_list(body.pop("operations", None), "operations")),
        attempts=_attempts(d, d.part("attempts", 15)),
        intents=intents,
        usage=_usage(d, d.part("usage", 7)),
        consumed_inputs=consumed,
        open_call_entries=open_calls,
        windows=_windows(d, as_list(body.get("windows"), "windows")),
        kernels=_kernels(d, as_list(body.pop("kernels", None), "kernels")),
        lines=lines,
        totals=UsageTotals(*totals),
        last_seq=last_seq,
        open_operation_id=d.refs([body.get("openOperation")], "open", 1, nullable=True)[0],
        last_cut=last_cut,
        system_prompt=system_prompt,
    )
    # The reducer is the only reader of these two: a state that is only read never
    # makes them (docs/benchmarks.md, register row "deferred-tables").
    tables.defer("ids", partial(_id_table, d.ids(), roles))
    tables.defer("intent_by_call", partial(by_call, tables.operations))
    return tables


_OPERATION_FIELDS = typed(int)  # the four counts; then two optional texts and started_at


def _operations(d: Decoder, rows: list[Any]) -> dict[str, Operation]:
    operations: dict[str, Operation] = {}
    for raw in rows:
        row = as_list(raw, "an operation", 15)
        op_id, input_id, resumes = d.refs(row[:3], "operation ids", 3, nullable=True)
        kind, status, *counts = row[3:12]  # then the options, the cell id, what it replays
        check(kind in _KINDS and status in _OPERATION_STATUSES, "an unknown kind or status")
        _OPERATION_FIELDS([*counts[:4], counts[6]], "operation counts")
        typed(str, type(None))([*counts[4:6], row[13]], "operation texts")
        check(op_id is not None and op_id not in operations, "an operation id")
        assert op_id is not None
        options = _run_options(row[12])
        (replays,) = d.refs(row[14:], "a replayed run", 1, nullable=True)
        operations[op_id] = Operation._make(
            (op_id, kind, status, input_id, resumes, *counts, options, row[13], replays)
        )
    return operations


def _run_options(value: object) -> RunOptions | None:
    return None if value is None else RunOptions.__pydantic_validator__.validate_python(value)


def _windows(d: Decoder, rows: list[Any]) -> dict[tuple[str, str], LearnedWindow]:
    windows: dict[tuple[str, str], LearnedWindow] = {}
    for raw in rows:
        url_ref, model_ref, tokens, source, fact_ref = as_list(raw, "a window", 5)
        url, model, fact_id = d.refs([url_ref, model_ref, fact_ref], "window strings", 3)
        check(source in _WINDOW_SOURCES, "an unknown window source")
        forgotten = source == "forgotten"
        counted = type(tokens) is int and tokens >= 1
        check(tokens is None if forgotten else counted, "a window that is no count")
        check((url, model) not in windows, "a window twice")
        windows[url, model] = LearnedWindow(tokens, source, fact_id)
    return windows


def _kernels(d: Decoder, rows: list[Any]) -> dict[str, Kernel]:
    """One row per kernelOpened (a handful per session): id, opened at, pid, host, started
    at, kernel id, notebook, entries / intents / operations before it, its notice."""
    kernels: dict[str, Kernel] = {}
    for raw in rows:
        row = as_list(raw, "a kernel", 11)
        kernel_id, host, jupyter_id, notebook, notice = d.refs(
            [row[0], row[3], row[5], row[6], row[10]], "kernel strings", 5, nullable=True
        )
        numbers = INTS([row[1], row[2], row[4], *row[7:10]], "kernel numbers")
        check(min(numbers) >= 0, "a negative kernel number")
        check(kernel_id is not None and kernel_id not in kernels, "a kernel id")
        check(host is not None, "a kernel without a host")
        assert kernel_id is not None and host is not None
        opened, pid, started, entries, intents, operations = numbers
        kernels[kernel_id] = Kernel(
            kernel_id, opened, pid, host, started, jupyter_id, notebook, entries, intents,
            operations, notice,
        )  # fmt: skip
    return kernels


def _attempts(d: Decoder, cols: list[Any]) -> dict[str, Attempt]:
    n = d.length(cols[0], "attempt ids")
    ids = d.refs(cols[0], "attempt ids", n)
    counts = d.column(cols[9], "tool call counts", n, INTS)
    check(not counts or min(counts) >= 0, "a negative count of tool calls")
    flat = d.refs(cols[10], "tool calls", 2 * sum(counts))
    pairs = zip(flat[0::2], flat[1::2], strict=True)
    if counts and min(counts) == max(counts) == 1:  # one call per answer: zip makes 1-tuples
        calls: list[Any] = list(zip(pairs))
    else:
        calls = [tuple(islice(pairs, k)) for k in counts]
    errors: list[AttemptError | None] = [None] * n
    for row in as_list(cols[11], "attempt errors"):
        index, kind, message, status = as_list(row, "an attempt error", 4)
        check(type(index) is int and 0 <= index < n, "an attempt error past the attempts")
        fields = {"kind": kind, "message": message, "status": status}
        if status is None:
            del fields["status"]
        errors[index] = AttemptError.__pydantic_validator__.validate_python(fields)
    columns = [
        ids,
        d.refs(cols[1], "attempt operations", n),
        d.column(cols[2], "attempt steps", n, INTS),
        d.column(cols[3], "attempt numbers", n, INTS),
        *(d.refs(cols[k], "attempt fields", n, nullable=k == 8) for k in range(4, 9)),
        calls,
        errors,
        d.column(cols[12], "attempt retryable", n, typed(bool, type(None))),
        d.column(cols[13], "attempt starts", n, INTS),
        d.column(cols[14], "attempt ends", n, INTS_OR_NONE),
    ]
    check(set(columns[7]) <= _ATTEMPT_STATUSES, "an unknown attempt status")
    return dict(zip(ids, records(Attempt, columns), strict=True))


def _intents(
    d: Decoder, cols: list[Any]
) -> tuple[dict[str, ToolIntent], Callable[[dict[str, Operation]], dict[tuple[str, str], str]]]:
    """The intents, and what makes `intent_by_call` (on first use: the reducer's check of
    a new toolStarted is its only reader): written with each intent and never removed,
    so derived from the intents' columns rather than stored."""
    tools = [
        ToolIdentity.__pydantic_validator__.validate_python(
            dict(zip(("name", "version", "source"), as_list(row, "a tool", 3), strict=True))
        )
        for row in as_list(d.body.get("tools"), "tools")
    ]
    n = d.length(cols[0], "intent ids")
    ids = d.refs(cols[0], "intent ids", n)
    columns = [
        ids,
        *(d.refs(cols[k], "intent fields", n) for k in range(1, 4)),
        d.column(cols[4], "intent tools", n, partial(_tool_refs, tools)),
        d.column(cols[5], "intent arguments", n, typed(dict)),
        *(d.refs(cols[k], "intent fields", n) for k in range(6, 11)),
    ]
    check(set(columns[6]) <= _POLICIES, "an unknown replay policy")
    check(set(columns[10]) <= _INTENT_STATUSES, "an unknown intent status")
    by_call = partial(_by_call, columns[1], columns[2], columns[3], ids)
    return dict(zip(ids, records(ToolIntent, columns), strict=True)), by_call


def _by_call(
    owners: list[str],
    attempts: list[str],
    calls: list[str],
    ids: list[str],
    operations: dict[str, Operation],
) -> dict[tuple[str, str], str]:
    """As the reducer keeps it: a replay's intents run again a call, they are not its own
    (docs/spec.md §21)."""
    keys = zip(attempts, calls, strict=True)
    pairs = zip(owners, keys, ids, strict=True)
    return {key: i for owner, key, i in pairs if operations[owner].kind != "replay"}


def _tool_refs(tools: list[ToolIdentity], refs: list[Any], what: str) -> list[ToolIdentity]:
    check(not refs or min(refs) >= 0, f"{what}: bad index")
    return list(map(tools.__getitem__, refs))


def _usage(d: Decoder, cols: list[Any]) -> dict[str, UsageRow]:
    n = d.length(cols[0], "usage kinds")
    kinds = d.column(cols[0], "usage kinds", n, codes(_USAGE_KINDS))
    targets = d.refs(cols[1], "usage targets", n)
    counts = [d.column(cols[2 + k], "usage counts", n, INTS) for k in range(4)]
    check(all(min(c) >= 0 for c in counts if c), "a negative token count")
    costs = d.column(cols[6], "usage costs", n, typed(float, type(None)))
    check(all(map(_cost_ok, set(costs))), "a cost that is no amount")  # a few distinct
    # Exactly one target each, by construction: the column says which field it names.
    # (Usage names an attempt, as a rule: the common case is one C-level copy.)
    if all(kinds):
        attempts, tools = targets, [None] * n
    else:
        attempts = [t if k else None for k, t in zip(kinds, targets, strict=True)]
        tools = [None if k else t for k, t in zip(kinds, targets, strict=True)]
    rows = dict(zip(targets, zip(attempts, tools, *counts, costs, strict=True), strict=True))
    check(len(rows) == n, "a usage target twice")
    return rows


def _id_table(ids: list[str], roles: list[IdRole]) -> dict[str, IdRole]:
    """`dict(zip(ids, roles))`, made as `dict.fromkeys` (no pair per id) with the ids of
    the rarer roles set again after: the same dict, keys in the same order.

    The ids are distinct as the writer wrote them (a dict's keys), which the MAC vouches
    for like everything else about what the lines reduce to; their type and the roles'
    were checked by the load."""
    table: dict[str, IdRole] = dict.fromkeys(ids, "fact")
    for index in compress(range(len(ids)), map(ne, roles, repeat("fact"))):
        table[ids[index]] = roles[index]
    return table


def _cost_ok(cost: float | None) -> bool:
    return cost is None or (cost >= 0 and math.isfinite(cost))
