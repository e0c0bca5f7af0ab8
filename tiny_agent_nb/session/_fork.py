"""Which session a file holds, from its header alone; and a fork: another session's
conversation under a new id (docs/spec.md §10), so a duplicated notebook never writes to
the file of the one it was copied from. The fork is written under a private name and
linked into place when complete: a process killed while forking leaves no half copy,
and a file already there is never replaced.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from ._exceptions import NotASessionError
from ._files import fsync_dir, open_regular, write_all
from ._framing import parse_header
from ._ids import new_id
from ._models import Header
from ._opening import Clock, epoch_ms
from ._reader import load_session

_CHUNK = 1 << 20  # bytes written at a time
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


def fork_session(source: str | Path, target: str | Path, *, clock: Clock = epoch_ms) -> Header:
    """Write `target`, a fork of the session at `source`; its new header. Raises what a
    load of `source` raises, FileExistsError when `target` exists, OSError when it cannot
    be written (nothing is left behind then)."""
    target = Path(target)
    state = load_session(source)
    header = state.header.model_copy(update={"id": new_id(), "createdAt": clock()})
    draft = target.with_name(f".{target.name}.fork.{secrets.token_hex(6)}.tmp")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            pending = [header.model_dump_json().encode("utf-8") + b"\n"]
            size = len(pending[0])
            for piece in state.transaction_bytes():
                pending.append(piece)
                size += len(piece)
                if size >= _CHUNK:
                    write_all(fd, b"".join(pending))
                    pending, size = [], 0
            write_all(fd, b"".join(pending))
            os.fsync(fd)
        finally:
            os.close(fd)
        _publish(draft, target)
        fsync_dir(target.parent)
    finally:
        draft.unlink(missing_ok=True)
    return header


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
