"""Which session a file holds, from its header alone; and a fork: another session's
conversation, whole or up to the end of one of its runs, under a new id (docs/spec.md
§10). A duplicated notebook gets one so it never writes to the file of the one it was
copied from; `%agent fork` and `tiny-agent-nb fork` make one to try another way. The fork
is written under a private name and linked into place when complete: a process killed
while forking leaves no half copy, and a file already there is never replaced.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from ._exceptions import ForkRefusedError, NotASessionError
from ._file_store import FileStore
from ._files import fsync_dir, open_regular, write_all
from ._framing import parse_header, parse_transaction
from ._ids import new_id
from ._models import Header, RecordFact
from ._opening import Clock, epoch_ms
from ._reader import load_session
from ._records import OperationFinished
from ._state import SessionState

_HEADER_BYTES = 1 << 16  # a header line is far shorter (its longest member is a path)


def read_header(path: str | Path) -> Header:
    """The header of the session at `path`, reading only its first line. Raises
    NotASessionError, SessionCorruptError (an invalid header) or OSError."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        first = os.read(fd, _HEADER_BYTES)
    finally:
        os.close(fd)
    line, lf, _ = first.partition(b"\n")
    if not lf:
        raise NotASessionError(path, "it has no complete first line")
    return parse_header(path, line)


def next_archive_path(path: Path) -> Path:
    """`analysis.agent.jsonl` → the first free `analysis.agent.<n>.jsonl` (n from 1): the
    name of another conversation of the same notebook (one `%agent new` or `%agent fork`
    kept, or a fork the command line made)."""
    stem = path.name.removesuffix(".jsonl")
    n = 1
    while os.path.lexists(candidate := path.with_name(f"{stem}.{n}.jsonl")):
        n += 1
    return candidate


def fork_session(
    source: str | Path,
    target: str | Path,
    *,
    through: int | None = None,
    refuse_open: bool = False,
    before_publish: Callable[[], object] | None = None,
    clock: Clock = epoch_ms,
) -> Header:
    """Write `target`, a fork of the session at `source`; its new header. The fork holds
    the transaction lines up to and including the one with run `through`'s
    operationFinished (runs numbered in file order from 1, as the timeline numbers them;
    None: every line). `refuse_open`: refuse to copy every line while a run is open (a
    user's fork; a duplicated notebook's copies a run in progress, which the fork's first
    writer settles). `before_publish` runs once the fork is whole and synced, just before
    it takes the name `target`. Raises ForkRefusedError (nothing written), what a load of
    `source` raises, FileExistsError when `target` exists, OSError when it cannot be
    written (nothing is left behind then)."""
    target = Path(target)
    state = load_session(source)
    lines = list(state.transaction_bytes())  # read again and checked, once
    count = _lines_through(state, lines, through, refuse_open=refuse_open)
    header = state.header.model_copy(update={"id": new_id(), "createdAt": clock()})
    draft = target.with_name(f".{target.name}.fork.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(draft, flags, 0o644)
    try:
        lines = lines[:count]
        _write(fd, header, lines)
        # Before the fork is published: no fork is ever without the blobs it names, so
        # a rewind inside it can restore them.
        FileStore.for_session(header.id).adopt(FileStore.for_session(state.header.id), lines)
        if before_publish is not None:
            before_publish()
        _publish(draft, target)
        fsync_dir(target.parent)
    finally:
        draft.unlink(missing_ok=True)
    return header


def _write(fd: int, header: Header, lines: list[bytes]) -> None:
    """`header` then `lines` into the new file `fd`, synced; `fd` closed."""
    try:
        write_all(fd, b"".join([header.model_dump_json().encode("utf-8") + b"\n", *lines]))
        os.fsync(fd)
    finally:
        os.close(fd)


def _lines_through(
    state: SessionState, lines: list[bytes], through: int | None, *, refuse_open: bool
) -> int | None:
    """How many of the transaction `lines` a fork through run `through` copies (None:
    all): up to and including the one holding its operationFinished."""
    operations = list(state.operations.values())
    if through is None:
        if refuse_open and state.open_operation is not None:
            raise _still_open(state, operations.index(state.open_operation) + 1)
        return None
    if not 1 <= through <= len(operations):
        held = f"its runs are 1 to {len(operations)}" if operations else "it has no run yet"
        raise ForkRefusedError(
            f"{state.path} has no run {through} ({held}, numbered as its timeline numbers "
            "them); nothing was written."
        )
    operation_id = operations[through - 1].id
    needle = operation_id.encode()
    for count, line in enumerate(lines, start=1):
        # Only a line naming the operation is decoded.
        if needle in line and any(
            isinstance(fact, RecordFact)
            and isinstance(fact.record, OperationFinished)
            and fact.record.operationId == operation_id
            for fact in parse_transaction(line)
        ):
            return count
    raise _still_open(state, through)


def _still_open(state: SessionState, number: int) -> ForkRefusedError:
    earlier = f"Fork through an earlier run ({number - 1}), or f" if number > 1 else "F"
    return ForkRefusedError(
        f"run {number} of {state.path} has not ended (the file holds no operationFinished "
        f"for it), and a fork ends with a run's end; nothing was written. {earlier}ork once "
        "it has ended: a kernel running it ends it; one that stopped left it open, and "
        "opening the session again settles it (interrupted)."
    )


def _publish(draft: Path, target: Path) -> None:
    """`draft` under the name `target`, never over a file that is there."""
    try:
        os.link(draft, target)  # FileExistsError when it is
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: check, then rename
        if target.exists() or target.is_symlink():
            raise FileExistsError(17, "File exists", str(target)) from None
        draft.rename(target)
