"""A session file's bytes as a reader reads them: a chunk at a time, its blocks hashed
(docs/session-format.md §8.1). `Source` is where a state's lines are read back from;
`Scan` is a full read's one pass over the lines."""

from __future__ import annotations

import mmap
import os
import weakref
from collections.abc import Iterator
from hashlib import sha256

# A chunk of the file read at once: by the reader's scan, and by iteration over lines.
# perf: register row "read-sizes" (docs/benchmarks.md): two are alive at once, and the
# allocator keeps later temporaries up to a freed chunk's size in its heap.
CHUNK = 1 << 20
# The file is hashed in blocks of this size (CHUNK is a multiple of it).
BLOCK = 1 << 16
BLOCK_DIGEST_SIZE = 32
PRIVATE_MAP = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}
_CLOSED = -2  # a source's descriptor once its last holder let go (-1: bytes in memory)


def block_digests(data: bytes | bytearray | memoryview) -> bytes:
    """The SHA-256 of each BLOCK of `data` (which starts at a block boundary)."""
    with memoryview(data) as view:
        return b"".join(
            [sha256(view[at : at + BLOCK]).digest() for at in range(0, len(view), BLOCK)]
        )


class Source:
    """Where a state's lines are read back from: its own read-only descriptor of the file
    it loaded (the inode whose bytes were validated, whatever the path names since), or
    bytes in memory. The descriptor closes when the last holder lets go (`release`), or
    when the source is freed. A closed source refuses every read: its descriptor's number
    may name another file by then."""

    __slots__ = ("__weakref__", "_close", "_data", "_fd", "_holders", "path")

    def __init__(self, path: str, *, fd: int = -1, data: bytes = b"") -> None:
        self.path = path
        self._fd = fd
        self._data = data
        # By id: a state's lines compare as a list does, so they cannot be hashed.
        self._holders: weakref.WeakValueDictionary[int, object] = weakref.WeakValueDictionary()
        self._close = weakref.finalize(self, os.close, fd) if fd >= 0 else None

    def hold(self, holder: object) -> None:
        self._holders[id(holder)] = holder

    def release(self, holder: object) -> None:
        """`holder` lets go; the last one closes the source (a second release is none)."""
        if self._holders.get(id(holder)) is not holder:
            return
        del self._holders[id(holder)]
        if not self._holders:
            self.close()  # the finalizer closes the descriptor once, and is then spent

    @property
    def closed(self) -> bool:
        return self._fd == _CLOSED

    def close(self) -> None:
        self._holders.clear()
        self._fd, self._data = _CLOSED, b""
        if self._close is not None:
            self._close()

    def _closed(self) -> ValueError:
        return ValueError(
            f"the session state of {self.path} was closed: load the session again to read it"
        )

    def held_bytes(self) -> bytes | None:
        """The bytes of a source held in memory; None for a descriptor's."""
        if self._fd == _CLOSED:
            raise self._closed()
        return self._data if self._fd < 0 else None

    def read_into(self, view: memoryview, offset: int) -> int:
        """A descriptor's bytes from `offset` into `view`: how many (0: the file ends)."""
        return os.preadv(self._fd, [view], offset)

    def read(self, offset: int, size: int) -> bytes:
        if self._fd < 0:
            if self._fd == _CLOSED:
                raise self._closed()
            return self._data[offset : offset + size]
        parts = []
        while size > 0:
            part = os.pread(self._fd, size, offset)
            if not part:  # the file is shorter now: the digest check reports it
                break
            parts.append(part)
            offset, size = offset + len(part), size - len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def chunks(self, start: int, end: int, first: int = 0) -> Iterator[bytes]:
        """The bytes from `start` to `end`, CHUNK at a time, the first piece `first` bytes
        if given (a reader that wants the header line alone reads no more)."""
        size = first or CHUNK
        while start < end:
            chunk = self.read(start, min(size, end - start))
            if not chunk:
                return
            yield chunk
            start += len(chunk)
            size = CHUNK


class Scan:
    """A pass over the complete lines (LF excluded) of a source's bytes from `start` to
    `end`; once run to the end, the bytes after the last LF are `tail`.

    # perf: register row "scan-map" (docs/benchmarks.md)
    The file is read CHUNK at a time into one anonymous memory map, reused, and each line
    is copied out of it: a `bytes` chunk per read, freed, raised glibc's mmap threshold
    to its size, and the later temporaries then left holes among the tables' records.

    # perf: register row "scan-blocks" (docs/benchmarks.md)
    Given `prefix` (the file's bytes before `start`), it also takes the SHA-256 of each
    BLOCK of the file from the map: `blocks(upto)` gives those up to the end of a line it
    handed out. No hash object outlives its block (one kept pins a pymalloc arena)."""

    __slots__ = ("_base", "_buffer", "_digests", "_end", "_hashed", "_source", "_start", "tail")

    def __init__(self, source: Source, start: int, end: int, prefix: bytes | None) -> None:
        self._source, self._start, self._end = source, start, end
        self._buffer: bytes | mmap.mmap = prefix or b""  # holds the file's bytes from _base
        self._base = 0 if prefix is not None else start
        # Digests of the blocks before _hashed; None: none taken.
        self._digests = bytearray() if prefix is not None else None
        self._hashed = 0
        self.tail = b""

    def blocks(self, upto: int) -> bytes:
        """The SHA-256 of each BLOCK of the file's bytes up to `upto`, where a line this
        scan handed out ends (its LF included): bytes it read, as it read them."""
        assert self._digests is not None, "a scan without a prefix takes no digests"
        if self._hashed < upto:
            self._hash(upto, last=True)
        assert self._hashed == upto, "blocks end where a line handed out ends"
        return bytes(self._digests)

    def _hash(self, upto: int, last: bool) -> None:
        """The blocks of the bytes up to `upto` (which the buffer holds), and with `last`
        the one it ends inside."""
        digests, base = self._digests, self._base
        if digests is None:
            return
        at = self._hashed
        with memoryview(self._buffer) as view:
            while at + BLOCK <= upto:
                digests += sha256(view[at - base : at - base + BLOCK]).digest()
                at += BLOCK
            if last and at < upto:
                digests += sha256(view[at - base : upto - base]).digest()
                at = upto
        self._hashed = at

    def __iter__(self) -> Iterator[bytes]:
        source, start, end = self._source, self._start, self._end
        held = source.held_bytes()
        if held is not None:  # in memory: digests, if wanted, from its bytes when asked
            self._buffer, self._base = held, 0
            parts = held[start:end].split(b"\n")
            self.tail = parts.pop()
            yield from parts
            return
        prefix = self._buffer
        assert isinstance(prefix, bytes)
        if end - start <= BLOCK:  # a few lines: no map
            data = source.read(start, end - start)
            self._buffer = prefix + data
            parts = data.split(b"\n")
            self.tail = parts.pop()
            yield from parts
            self._hash(start + len(data) - len(self.tail), last=True)
            return
        buffer = mmap.mmap(-1, CHUNK, **PRIVATE_MAP)
        if self._digests is not None:
            # The prefix's whole blocks now; the buffer starts with the rest of it.
            self._hash(len(prefix) - len(prefix) % BLOCK, last=False)
            buffer.write(prefix[self._hashed :])
            self._base = self._hashed
        self._buffer = buffer
        del prefix
        filled = at = buffer.tell()  # buffer[:filled] holds the file's bytes up to `start`
        try:
            while True:
                if start < end:
                    if filled == len(buffer):  # one line (and a block's start) longer
                        bigger = mmap.mmap(-1, 2 * len(buffer), **PRIVATE_MAP)
                        bigger.write(buffer)
                        buffer.close()
                        buffer = self._buffer = bigger
                    want = min(len(buffer), filled + end - start)
                    with memoryview(buffer) as view:
                        got = source.read_into(view[filled:want], start)
                    if not got:  # the file is shorter now: what was read is all
                        end = start
                    filled, start = filled + got, start + got
                find = buffer.find
                lf = find(b"\n", at, filled)
                while lf >= 0:
                    yield buffer[at:lf]
                    at = lf + 1
                    lf = find(b"\n", at, filled)
                # The lines handed out so far: their whole blocks, or all at the end.
                self._hash(self._base + at, last=start >= end)
                if start >= end:
                    self.tail = buffer[at:filled]
                    return
                # The line begun, and the block begun if hashing, to the front.
                keep = min(at, self._hashed - self._base) if self._digests is not None else at
                buffer.move(0, keep, filled - keep)
                self._base += keep
                filled, at = filled - keep, at - keep
        finally:
            buffer.close()
