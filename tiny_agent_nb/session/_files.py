"""Session files at the OS level: open (regular files only, found out without blocking),
read, write.

A path given to the store or a reader may name anything: a FIFO (opening it for reading
waits for a writer, forever), a device (`/dev/zero` never ends; `/dev/null` swallows every
commit), a directory. Each is opened with O_NONBLOCK, identified with fstat on the
descriptor (no race with a rename between a stat and the open), and refused with
NotASessionError unless it is a regular file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ._exceptions import NotASessionError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(path: str | Path, mode: int) -> NotASessionError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return NotASessionError(path, f"it is {kind}; a session is a regular file")


def open_regular(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """os.open(path, flags) for a regular file; anything else raises NotASessionError
    (and is left as it was: the descriptor is closed before anything is read or written)."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except IsADirectoryError:  # O_RDWR on a directory fails before fstat could say so
        raise NotASessionError(path, "it is a directory; a session is a regular file") from None
    try:
        st_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(st_mode):
            raise _not_regular(path, st_mode)
        # O_NONBLOCK means nothing for a regular file; clear it so it never surprises.
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int) -> bytes:
    """The file's bytes up to its size when asked (a writer may be appending meanwhile:
    what it adds later is not read, and a line it has half written is a torn tail)."""
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def read_session_file(path: str | Path) -> bytes:
    """The bytes of the regular file at `path` (NotASessionError for anything else;
    OSError when it cannot be opened)."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """One os.write per transaction; loop only if the kernel accepted part of it."""
    # perf: register row "one-write" (docs/benchmarks.md)
    written = os.write(fd, data)
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def fsync_dir(path: Path) -> None:
    """fsync the directory holding `path`, so a new file's name survives power loss too."""
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
