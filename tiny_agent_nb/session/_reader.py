"""The one reader loop: bytes -> SessionState, for a load and for salvage alike.

As LevelDB's `log::Reader` does with its `Reporter`, the loop reads every complete line
after the header, applies it, and hands a damaged one to a reporter instead of deciding
itself what damage means: `load_session` raises SessionCorruptError, `salvage` keeps the
prefix before it. Either way the damaged line ends the read -- a line is never skipped --
and the bytes after the last LF are a torn tail, never a transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from ._exceptions import NotASessionError, SessionCorruptError
from ._files import read_session_file
from ._framing import (
    describe_validation_error,
    is_torn_header,
    parse_header,
    parse_transaction,
)
from ._gc import gc_paused
from ._reducer import Violation, apply_transaction
from ._snapshot import load_snapshot
from ._state import SessionState


class Damage(NamedTuple):
    """A complete line after the header that does not load."""

    line: int  # its 1-based line number
    offset: int  # where it starts in the bytes read
    size: int  # its bytes, the LF excluded
    reason: str  # the error a load gives for it


Reporter = Callable[[Damage], None]


def load_session(path: str | Path) -> SessionState:
    """Read-only load: takes no lock, never writes, ignores a torn tail.

    Only a regular file is read (a FIFO or a device is refused without blocking). An
    authentic snapshot beside it saves reducing the lines it covers (docs/spec.md §14)."""
    return reduce_bytes(path, read_session_file(path), snapshot=True)


def load_session_bytes(data: bytes, name: str = "<memory>") -> SessionState:
    """`load_session` of a session file's bytes already in memory; `name` stands for its
    path in errors and in the state."""
    return reduce_bytes(name, data)


def reduce_bytes(path: str | Path, data: bytes, *, snapshot: bool = False) -> SessionState:
    """The whole file image reduced into a SessionState; damage is SessionCorruptError.
    With `snapshot`, `data` is the file at `path` and the snapshot beside it may be used
    for the lines it covers; the result is the same either way."""

    def corrupt(damage: Damage) -> None:
        raise SessionCorruptError(path, damage.line, damage.reason)

    return read_session(path, data, corrupt, snapshot=snapshot)


def read_session(
    path: str | Path, data: bytes, reporter: Reporter, *, snapshot: bool = False
) -> SessionState:
    """Every whole line of `data` up to the first damaged one (given to `reporter`).

    A missing or invalid header raises NotASessionError / SessionCorruptError (line 1)
    whatever the reporter: without a header there is nothing to read.
    """
    with gc_paused():
        return _read(path, data, reporter, snapshot)


def _read(path: str | Path, data: bytes, reporter: Reporter, snapshot: bool) -> SessionState:
    header_end = data.find(b"\n")
    torn = len(data) - data.rfind(b"\n") - 1  # the bytes after the last LF
    if header_end < 0:
        if not data:
            reason = "the file is empty"
        elif is_torn_header(data):
            reason = f"the header line is torn ({torn} bytes, no LF)"
        else:  # a foreign file with no line end (one line of JSON, a note)
            reason = f"its {torn} bytes hold no complete line and do not begin a session header"
        raise NotASessionError(path, reason)
    header_line = data[:header_end]
    state = SessionState(str(path), parse_header(path, header_line), torn_tail_bytes=torn)
    state._header_line = header_line
    found = load_snapshot(path, data) if snapshot else None
    if found is None:
        lines = data.split(b"\n")  # not a copy of the complete lines first: of the file
        del lines[0]  # the header
        start = header_end + 1
    else:
        state._tables, start = found
        state._snapshot_lines = len(state._tables.lines)
        lines = data[start:].split(b"\n")
    lines.pop()  # the torn tail, or the nothing after the last LF
    first = 2 + len(state._tables.lines)
    tables = state._tables  # the reader builds the state it hands out
    for lineno, line in enumerate(lines, start=first):
        try:
            apply_transaction(tables, parse_transaction(line))
            # An entry's slot names its line, and the reducer compares slots (a
            # compaction's cut never moves backwards): the line is kept as it is applied.
            tables.lines.append(line)
            continue
        except ValidationError as exc:
            reason = describe_validation_error(exc)
        except Violation as exc:
            reason = str(exc)
        # Counted only on damage, so a clean load pays nothing for it.
        offset = start + sum(len(before) + 1 for before in islice(lines, lineno - first))
        reporter(Damage(lineno, offset, len(line), reason))
        break
    return state
