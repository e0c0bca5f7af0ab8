"""The one reader loop: bytes -> SessionState, for a load and for salvage alike.

As LevelDB's `log::Reader` does with its `Reporter`, the loop hands a damaged line to a
reporter: `load_session` raises SessionCorruptError, `salvage` keeps the prefix before
it. Either way the damaged line ends the read (a line is never skipped), and the bytes
after the last LF are a torn tail, never a transaction.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from ._exceptions import NotASessionError, SessionCorruptError
from ._files import open_regular
from ._framing import (
    describe_validation_error,
    is_torn_header,
    parse_header,
    parse_transaction,
)
from ._lines import Lines
from ._reducer import apply_transaction
from ._source import BLOCK, Scan, Source
from ._state import SessionState
from ._tables import Tables, Violation


class Damage(NamedTuple):
    """A complete line after the header that does not load."""

    line: int  # its 1-based line number
    offset: int  # where it starts in the bytes read
    size: int  # its bytes, the LF excluded
    reason: str  # the error a load gives for it


Reporter = Callable[[Damage], None]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off while a file is reduced: each line makes a dozen pydantic objects
    that die young, and nothing made here forms a cycle worth collecting mid-load."""
    # perf: register row "gc-load" (docs/benchmarks.md)
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_session(path: str | Path) -> SessionState:
    """Read-only load: takes no lock, never writes, ignores a torn tail. The state keeps
    the descriptor it read through, to read lines back (docs/session-format.md §8.1)."""
    fd = open_regular(path, os.O_RDONLY)
    source = Source(str(path), fd=fd)  # owns fd from here on
    return reduce_source(path, source, os.fstat(fd).st_size)


def load_session_bytes(data: bytes, name: str = "<memory>") -> SessionState:
    """`load_session` of a session file's bytes already in memory; `name` stands for its
    path in errors and in the state (which reads its lines back from `data`)."""
    return reduce_source(name, Source(name, data=data), len(data))


def reduce_source(
    path: str | Path, source: Source, size: int, reporter: Reporter | None = None
) -> SessionState:
    """The file's first `size` bytes reduced into a SessionState, up to the first damaged
    line, which is given to `reporter` (by default, raised as SessionCorruptError). A
    missing or invalid header raises whatever the reporter: there is nothing to read."""

    def corrupt(damage: Damage) -> None:
        raise SessionCorruptError(path, damage.line, damage.reason)

    with gc_paused():
        return _read(path, source, size, reporter or corrupt)


def _read(path: str | Path, source: Source, size: int, reporter: Reporter) -> SessionState:
    # perf: register row "header-read" (docs/benchmarks.md)
    # The header line alone first (BLOCK: below glibc's mmap threshold, see `Scan`),
    # then the lines, scanned from `start`.
    chunks = source.chunks(0, size, first=BLOCK)
    head = b""
    for chunk in chunks:
        head += chunk
        if b"\n" in chunk:
            break
    header_end = head.find(b"\n")
    if header_end < 0:
        torn = len(head)
        if not head:
            reason = "the file is empty"
        elif is_torn_header(head):
            reason = f"the header line is torn ({torn} bytes, no LF)"
        else:  # a foreign file with no line end (one line of JSON, a note)
            reason = f"its {torn} bytes hold no complete line and do not begin a session header"
        raise NotASessionError(path, reason)
    header = parse_header(path, head[:header_end])
    start = header_end + 1
    # Every line: the scan takes the block digests that check them (docs/session-format.md
    # §8.1), from the header's bytes on.
    tables = Tables(lines=Lines(source, start))
    scan = Scan(source, start, size, head[:start])
    del head, chunks
    lines = tables.lines
    for lineno, line in enumerate(scan, start=2):
        try:
            apply_transaction(tables, parse_transaction(line))
            # An entry's slot names its line, and the reducer compares slots (a
            # compaction's cut never moves backwards): the line is kept as it is applied.
            lines.add_scanned(line)
            continue
        except ValidationError as exc:
            reason = describe_validation_error(exc)
        except Violation as exc:
            reason = str(exc)
        lines.cover(scan.blocks(lines.end()))
        # The state of the lines before it; its torn tail is not counted: the file does
        # not load as it is.
        state = SessionState(str(path), header, tables)
        reporter(Damage(lineno, lines.end(), len(line), reason))
        return state
    lines.cover(scan.blocks(lines.end()))
    return SessionState(str(path), header, tables, torn_tail_bytes=len(scan.tail))
