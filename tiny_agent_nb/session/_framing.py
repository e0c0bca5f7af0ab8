"""Bytes <-> transactions: LF framing, the header line, torn tails (docs/session-format.md §1, §5).

A line is one transaction: a bare fact object or a non-empty array of facts. Bytes after
the last LF are a torn tail left by a writer that died mid-append; they are never a
transaction. A complete line that does not parse is corruption and is reported with its
line number, never skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from ._exceptions import InvalidTransactionError, NotASessionError, SessionCorruptError
from ._models import FACT_ADAPTER, FACT_LIST_ADAPTER, HEADER_ADAPTER, Fact, Header
from ._records import FORMAT_VERSION

# pydantic's words for a line that is not JSON, e.g. "Invalid JSON: expected ident at
# line 1 column 2": the position is inside the one line it parsed, never the file's line.
_JSON_POSITION = re.compile(r"^(?P<what>.*) at line 1 column (?P<column>\d+)$")


def describe_validation_error(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    if first["type"] == "json_invalid":
        problem = str((first.get("ctx") or {}).get("error", first["msg"]))
        found = _JSON_POSITION.match(problem)
        if found is None:
            return f"invalid JSON ({problem})"
        return f"invalid JSON at character {found['column']} ({found['what']})"
    where = ".".join(str(part) for part in first["loc"])
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where + ': ' if where else ''}{first['msg']}{more}"


def split_complete(data: bytes) -> tuple[bytes, int]:
    """The LF-terminated prefix (without its last LF) and the size of the torn tail."""
    last_lf = data.rfind(b"\n")
    if last_lf < 0:
        return b"", len(data)
    return data[:last_lf], len(data) - last_lf - 1


# The first bytes of every header this writer makes (Header's fields in their order; the
# store writes the whole line with one write). Bytes without an LF that start with these,
# or are a prefix of them, are what a writer that died while creating the file can have
# left. Nothing else is ever overwritten: a settings.json holding one line of JSON without
# a final LF is somebody else's file (docs/session-format.md §6.6).
HEADER_START = b'{"kind":"header","version":%d,' % FORMAT_VERSION


def is_torn_header(data: bytes) -> bool:
    """True for an empty file or a header line cut short while the file was created."""
    if b"\n" in data:
        return False
    return data.startswith(HEADER_START) or HEADER_START.startswith(data)


def parse_header(path: str | Path, line: bytes) -> Header:
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: absurdly nested arrays
        raise NotASessionError(path, "line 1 is not JSON") from None
    if not isinstance(raw, dict) or raw.get("kind") != "header":
        raise NotASessionError(path, 'line 1 is not a {"kind":"header"} object')
    try:
        return HEADER_ADAPTER.validate_json(line)
    except ValidationError as exc:
        raise SessionCorruptError(
            path, 1, f"invalid header: {describe_validation_error(exc)}"
        ) from None


# perf: register row "direct-validators" (docs/benchmarks.md)
# The adapters' own validators, called directly: `TypeAdapter.validate_json` is a Python
# frame that passes six keyword arguments on to them, once per line of a load.
_validate_fact = FACT_ADAPTER.validator.validate_json
_validate_facts = FACT_LIST_ADAPTER.validator.validate_json


def parse_transaction(line: bytes) -> list[Fact]:
    """Raises ValidationError; callers turn it into the error of their context."""
    if line[:1] == b"[":
        facts: list[Fact] = _validate_facts(line)
        return facts
    return [_validate_fact(line)]


def encode_transaction(facts: Sequence[Fact]) -> bytes:
    """The transaction's line, LF included; InvalidTransactionError naming the fact that
    cannot be written (a string holding a lone surrogate is no text UTF-8 can encode)."""
    try:
        if len(facts) == 1:
            return FACT_ADAPTER.dump_json(facts[0]) + b"\n"
        return FACT_LIST_ADAPTER.dump_json(list(facts)) + b"\n"
    except ValueError:  # PydanticSerializationError
        raise _unwritable(facts) from None


def _unwritable(facts: Sequence[Fact]) -> InvalidTransactionError:
    for index, fact in enumerate(facts):
        try:
            FACT_ADAPTER.dump_json(fact)
        except ValueError as exc:
            reason = f"it cannot be written as JSON text ({exc})"
            return InvalidTransactionError(reason, index=index)
    return InvalidTransactionError("it cannot be written as JSON text")
