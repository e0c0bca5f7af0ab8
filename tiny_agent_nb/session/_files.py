"""Session files at the OS level: open, read, write; the bytes a state validated, checked
when read again (`ReadBytes`); and the two kinds of file a store writes through (a
descriptor, or bytes in memory: LevelDB's StringDest).

A path may name anything: a FIFO (opening it for reading waits forever), a device
(`/dev/zero` never ends), a directory. Each is opened with O_NONBLOCK, identified with
fstat on the descriptor (no race with a rename), and refused unless a regular file.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ._exceptions import NotASessionError, SessionError

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
    """os.open(path, flags) for a regular file; anything else raises NotASessionError,
    closed before anything is read or written."""
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
    """The file's bytes up to its size now (a writer may be appending meanwhile)."""
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
    """The bytes of the regular file at `path` (NotASessionError for anything else)."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """All of `data`, however much the kernel accepts per write."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(directory: Path) -> None:
    """fsync `directory`, so the name of a file just created in it survives power loss too."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class ReadBytes:
    """The bytes of its file a state validated: how many (the header included) and their
    SHA-256, and how to read the file again. What needs the lines' bytes (a fork's copy,
    `SessionState.facts`) reads them again, and they must be these (docs/session-format.md
    §8.1)."""

    __slots__ = ("_digest", "path", "read", "size")

    def __init__(self, path: str, read: Callable[[], bytes], data: bytes | memoryview) -> None:
        self.path = path
        self.read = read
        self.size = len(data)
        self._digest = hashlib.sha256(data)

    def add(self, line: bytes) -> None:
        """A line this process committed (LF included), now in the file after them."""
        self.size += len(line)
        self._digest.update(line)

    def copy(self) -> ReadBytes:
        copied = ReadBytes.__new__(ReadBytes)
        copied.path, copied.read, copied.size = self.path, self.read, self.size
        copied._digest = self._digest.copy()
        return copied

    def lines(self) -> list[bytes]:
        """The transaction lines (LF excluded), read again and checked."""
        data = self.read()[: self.size]
        if hashlib.sha256(data).digest() != self._digest.digest():
            raise SessionError(
                f"{self.path} changed on disk after it was read: its first {self.size:,} "
                "bytes are no longer the ones validated (it was truncated, rewritten or "
                "replaced). Nothing was written; load the session again."
            )
        return data.split(b"\n")[1:-1]


class StoreFile(Protocol):
    """What a SessionStore needs of the file it is the one writer of."""

    def read(self) -> bytes: ...
    def read_again(self) -> bytes: ...
    def append(self, data: bytes) -> None: ...
    def truncate(self, size: int) -> None: ...
    def sync(self) -> None: ...
    def rewrite(self, offset: int) -> None: ...
    def size(self) -> int: ...
    def moved(self) -> str | None: ...
    def close(self) -> None: ...


class DescriptorFile:
    """A regular file opened O_APPEND and flock-ed by the store (closing it releases the
    lock); `path` is absolute (a kernel's working directory changes)."""

    def __init__(self, fd: int, path: str | Path) -> None:
        self.fd = fd
        self.path = Path(path).absolute()
        st = os.fstat(fd)
        # Stable while the descriptor is open: an inode in use is never given to another file.
        self._identity = (st.st_dev, st.st_ino)

    def moved(self) -> str | None:
        """None while `path` names this file; else what happened to it, in words (docs/
        session-format.md §6.4: a `git checkout` or an editor renames a file over it)."""
        try:
            st = self.path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return "it was deleted, or moved (itself or its folder)"
        except OSError as exc:
            return f"whether it is still there cannot be checked ({exc.strerror or exc})"
        if (st.st_dev, st.st_ino) != self._identity:
            return "another file was renamed over it"
        return None

    def follow(self, path: str | Path) -> None:
        """The store renamed this file to `path` itself."""
        self.path = Path(path).absolute()

    def read(self) -> bytes:
        return read_fd(self.fd)

    def read_again(self) -> bytes:
        """The file read again by its path, for a state (which outlives the store): the
        state checks it still holds what it validated."""
        return read_session_file(self.path)

    def append(self, data: bytes) -> None:
        write_all(self.fd, data)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def sync(self) -> None:
        os.fsync(self.fd)

    def rewrite(self, offset: int) -> None:
        """Write the bytes from `offset` to the end again, unchanged, so the next sync
        writes them whatever a failed one left the page cache believing."""
        data = read_fd(self.fd)[offset:]
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        # pwrite on an O_APPEND descriptor appends on Linux, whatever the offset.
        fcntl.fcntl(self.fd, fcntl.F_SETFL, flags & ~os.O_APPEND)
        try:
            view = memoryview(data)
            while view:
                written = os.pwrite(self.fd, view, offset)
                view, offset = view[written:], offset + written
        finally:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, flags)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def close(self) -> None:
        os.close(self.fd)


class MemoryFile:
    """A session file held in the caller's bytearray: the store's code, no disk, no lock."""

    def __init__(self, buffer: bytearray) -> None:
        self.buffer = buffer

    def read(self) -> bytes:
        return bytes(self.buffer)

    def read_again(self) -> bytes:
        return bytes(self.buffer)

    def append(self, data: bytes) -> None:
        self.buffer += data

    def truncate(self, size: int) -> None:
        del self.buffer[size:]

    def sync(self) -> None:
        """Memory has nothing to flush."""

    def rewrite(self, offset: int) -> None:
        """Memory loses nothing to a failed flush."""

    def size(self) -> int:
        return len(self.buffer)

    def moved(self) -> str | None:
        """Memory has no path to lose."""
        return None

    def close(self) -> None:
        """Nothing to release: the bytes stay the caller's."""
