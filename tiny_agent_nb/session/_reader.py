"""The one reader loop: bytes -> SessionState, for a load and for salvage alike.

As LevelDB's `log::Reader` does with its `Reporter`, the loop hands a damaged line to a
reporter: `load_session` raises SessionCorruptError, `salvage` keeps the prefix before
it. Either way the damaged line ends the read (a line is never skipped), and the bytes
after the last LF are a torn tail, never a transaction.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from ._exceptions import NotASessionError, SessionCorruptError
from ._files import ReadBytes, read_session_file
from ._framing import (
    describe_validation_error,
    is_torn_header,
    parse_header,
    parse_transaction,
)
from ._reducer import apply_transaction
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
    """The cyclic GC off while a file is reduced: each line makes a dozen pydantic objects,
    kept or dying young, and nothing made here forms a cycle worth collecting mid-load."""
    # perf: register row "gc-load" (docs/benchmarks.md)
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_session(path: str | Path) -> SessionState:
    """Read-only load: takes no lock, never writes, ignores a torn tail."""
    again = partial(read_session_file, Path(path).absolute())  # a kernel's cwd changes
    return reduce_bytes(path, read_session_file(path), again)


def load_session_bytes(data: bytes, name: str = "<memory>") -> SessionState:
    """`load_session` of a session file's bytes already in memory; `name` stands for its
    path in errors and in the state."""
    return reduce_bytes(name, data, lambda: data)


def reduce_bytes(
    path: str | Path,
    data: bytes,
    read_again: Callable[[], bytes],
    reporter: Reporter | None = None,
) -> SessionState:
    """The file's bytes `data` reduced into a SessionState, up to the first damaged line,
    which is given to `reporter` (by default, raised as SessionCorruptError). A missing or
    invalid header raises whatever the reporter: there is nothing to read. `read_again`
    reads the file again, for what needs its lines' bytes later."""

    def corrupt(damage: Damage) -> None:
        raise SessionCorruptError(path, damage.line, damage.reason)

    with gc_paused():
        return _read(str(path), data, read_again, reporter or corrupt)


def _read(
    path: str, data: bytes, read_again: Callable[[], bytes], reporter: Reporter
) -> SessionState:
    start = data.find(b"\n") + 1
    if not start:
        if not data:
            reason = "the file is empty"
        elif is_torn_header(data):
            reason = f"the header line is torn ({len(data)} bytes, no LF)"
        else:  # a foreign file with no line end (one line of JSON, a note)
            reason = (
                f"its {len(data)} bytes hold no complete line and do not begin a session header"
            )
        raise NotASessionError(path, reason)
    header = parse_header(path, data[: start - 1])
    tables = Tables()
    lineno = 1
    while (end := data.find(b"\n", start)) >= 0:
        lineno += 1
        line = data[start:end]
        try:
            apply_transaction(tables, parse_transaction(line))
        except ValidationError as exc:
            reason = describe_validation_error(exc)
        except Violation as exc:
            reason = str(exc)
        else:
            tables.transactions += 1
            start = end + 1
            continue
        # The state of the lines before it; its torn tail is not counted: the file does
        # not load as it is.
        state = SessionState(header, _read_bytes(path, read_again, data, start), tables)
        reporter(Damage(lineno, start, len(line), reason))
        return state
    read = _read_bytes(path, read_again, data, start)
    return SessionState(header, read, tables, torn_tail_bytes=len(data) - start)


def _read_bytes(path: str, read_again: Callable[[], bytes], data: bytes, end: int) -> ReadBytes:
    with memoryview(data) as view:
        return ReadBytes(path, read_again, view[:end])
