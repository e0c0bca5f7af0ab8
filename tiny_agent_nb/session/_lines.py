"""The transaction lines of a session state: where each lies in the file, read back on use.

# perf: register row "lines-on-disk" (docs/benchmarks.md)
History's content stays in the session file, where it already is (docs/spec.md §14.1):
a state keeps, per line it read, where the line ends, and a digest of its bytes taken
while they were validated: for the lines a snapshot covers, the SHA-256 of each BLOCK of
the file that its MAC is computed over (one hashing pass, as before the lines left
memory); for each line reduced, an 8-byte BLAKE2b of the line. Reading a line back is a
`pread` from the state's own read-only descriptor, and its bytes must match that digest:
a file truncated or rewritten after the load raises SessionCorruptError naming the line,
and never hands out bytes nobody validated. Lines this process commits stay in memory (`more`) as
written: they are what a writer adds in one kernel, small beside a long history.
"""

from __future__ import annotations

import mmap
import os
import weakref
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from functools import partial
from hashlib import blake2b, sha256
from operator import add, methodcaller, not_, sub

from ._exceptions import SessionCorruptError

DIGEST_SIZE = 8
# A chunk of the file read at once: by the reader's scan, and by iteration over lines.
# perf: register row "read-sizes" (docs/benchmarks.md): two are alive at once, and the
# allocator keeps later temporaries up to a freed chunk's size in its heap.
CHUNK = 1 << 20
# The covered prefix is hashed in blocks of this size (CHUNK is a multiple of it), and a
# read of one covered line reads (and checks) READ_AHEAD of them at once.
BLOCK = 1 << 16
BLOCK_DIGEST_SIZE = 32
READ_AHEAD = 1 << 20
_hash = partial(blake2b, digest_size=DIGEST_SIZE)
_digest = methodcaller("digest")
_ends_line = methodcaller("endswith", b"\n")
PRIVATE_MAP = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}


def block_digests(data: bytes | bytearray | memoryview) -> bytes:
    """The SHA-256 of each BLOCK of `data` (which starts at a block boundary)."""
    with memoryview(data) as view:
        return b"".join(
            [sha256(view[at : at + BLOCK]).digest() for at in range(0, len(view), BLOCK)]
        )


class BlockHasher:
    """`block_digests` of bytes given in pieces of any size."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self.digests = bytearray()

    def update(self, piece: bytes | memoryview) -> None:
        self._pending += piece
        full = len(self._pending) - len(self._pending) % BLOCK
        if full:
            with memoryview(self._pending) as view:
                self.digests += block_digests(view[:full])
            del self._pending[:full]

    def finish(self) -> bytes:
        if self._pending:
            self.digests += block_digests(self._pending)
            self._pending.clear()
        return bytes(self.digests)


class Source:
    """Where a state's lines are read back from: its own read-only descriptor of the file
    it loaded (closed when the last state holding it goes), or bytes already in memory.

    A descriptor names the inode, not the path: a state outlives its writer's `close()`,
    and a file deleted or renamed over after the load is still read from the very inode
    whose bytes were validated (docs/spec.md §14.1)."""

    __slots__ = ("__weakref__", "_data", "_fd", "path")

    def __init__(self, path: str, *, fd: int = -1, data: bytes = b"") -> None:
        self.path = path
        self._fd = fd
        self._data = data
        if fd >= 0:
            weakref.finalize(self, os.close, fd)

    def read(self, offset: int, size: int) -> bytes:
        if self._fd < 0:
            return self._data[offset : offset + size]
        parts = []
        while size > 0:
            part = os.pread(self._fd, size, offset)
            if not part:  # the file is shorter now: the digest check reports it
                break
            parts.append(part)
            offset, size = offset + len(part), size - len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def block_digests(self, end: int) -> tuple[bytes, bytes]:
        """`block_digests` of the first `end` bytes (fewer if the file is shorter now),
        and the last of them (b"" for none).

        # perf: register row "hash-buffer" (docs/benchmarks.md)
        The file is read CHUNK at a time into one reused buffer and hashed from it: a
        fresh `bytes` per chunk would fault its pages in again on every read."""
        if self._fd < 0:
            data = self._data[:end]
            return block_digests(data), data[-1:]
        digests: list[bytes] = []
        # A memory map, not a bytearray, for the reason of `lines` (register row "scan-map").
        buffer = mmap.mmap(-1, max(1, min(CHUNK, end)), **PRIVATE_MAP)
        view = memoryview(buffer)
        offset = filled = 0
        try:
            while offset < end:
                want = min(CHUNK, end - offset)
                filled = 0
                while filled < want:
                    got = os.preadv(self._fd, [view[filled:want]], offset + filled)
                    if not got:  # the file is shorter now: the caller sees it
                        end = offset + filled
                        break
                    filled += got
                digests.append(block_digests(view[:filled]))
                offset += filled
            last = buffer[filled - 1 : filled] if offset else b""
        finally:
            view.release()
            buffer.close()
        return b"".join(digests), last

    def lines(self, start: int, end: int, tail: list[bytes]) -> Iterator[bytes]:
        """The complete lines of the bytes from `start` to `end` (LF excluded); the bytes
        after the last LF go to `tail`. A full read's scan.

        # perf: register row "scan-map" (docs/benchmarks.md)
        The file is read CHUNK at a time into one anonymous memory map, reused (a longer
        line grows it), and each line is copied out of it: no large block passes through
        the C allocator. A `bytes` chunk per read, freed, raised glibc's mmap threshold to
        its size, and every later temporary of that size or less (the next chunks, the
        lines split out of them) then landed in the heap, among the tables' records:
        the holes they left stayed resident."""
        if self._fd < 0 or end - start <= BLOCK:  # in memory, or a few lines (no map)
            data = self._data[start:end] if self._fd < 0 else self.read(start, end - start)
            parts = data.split(b"\n")
            tail.append(parts.pop())
            yield from parts
            return
        buffer = mmap.mmap(-1, CHUNK, **PRIVATE_MAP)
        filled = at = 0  # buffer[:filled] holds the file's bytes up to `start`
        try:
            while True:
                if start < end:
                    if filled == len(buffer):  # one line longer than the buffer
                        bigger = mmap.mmap(-1, 2 * len(buffer), **PRIVATE_MAP)
                        bigger.write(buffer)
                        buffer.close()
                        buffer = bigger
                    want = min(len(buffer), filled + end - start)
                    with memoryview(buffer) as view:
                        got = os.preadv(self._fd, [view[filled:want]], start)
                    if not got:  # the file is shorter now: what was read is all
                        end = start
                    filled, start = filled + got, start + got
                find = buffer.find
                lf = find(b"\n", at, filled)
                while lf >= 0:
                    yield buffer[at:lf]
                    at = lf + 1
                    lf = find(b"\n", at, filled)
                if start >= end:
                    tail.append(buffer[at:filled])
                    return
                buffer.move(0, at, filled - at)  # the line begun, to the front
                filled, at = filled - at, 0
        finally:
            buffer.close()

    def chunks(self, start: int, end: int, first: int = 0) -> Iterator[bytes]:
        """The bytes from `start` to `end`, CHUNK at a time (fewer at the file's end),
        the first piece `first` bytes if given: a reader that wants the header line
        alone, and then the snapshot's digests, reads no more than that before them."""
        size = first or CHUNK
        while start < end:
            chunk = self.read(start, min(size, end - start))
            if not chunk:
                return
            yield chunk
            start += len(chunk)
            size = CHUNK


class Lines:
    """The transaction lines: those read from the file (`ends`; the first `covered`
    checked by `blocks`, the others by `digests`; read back from `source`), then those
    committed by this process (bytes, LF included, `more`)."""

    __slots__ = ("_blocks", "_cache", "_covered", "_digests", "_ends", "_more", "_source")

    def __init__(
        self,
        source: Source | None = None,
        start: int = 0,
        ends: array[int] | None = None,
        blocks: bytes = b"",
    ) -> None:
        self._source = source if source is not None else Source("<memory>")
        # Line i of the file is bytes ends[i] .. ends[i + 1] - 1 (its LF excluded). Only
        # the load appends here; copies share them afterwards.
        self._ends = array("q", (start,)) if ends is None else ends
        self._covered = len(self._ends) - 1  # lines checked by `blocks`
        self._blocks = blocks  # of the file's bytes 0 .. ends[covered], BLOCK at a time
        self._digests = bytearray()  # of the lines after them, one each
        self._more: list[bytes] = []
        self._cache = (0, b"")  # the covered bytes last read and checked, and where

    def __len__(self) -> int:
        return len(self._ends) - 1 + len(self._more)

    # -- what the load adds ----------------------------------------------------------
    def add_read(self, line: bytes) -> None:
        """The next line of the file (validated by the caller), as read."""
        self._ends.append(self._ends[-1] + len(line) + 1)
        self._digests += _hash(line).digest()

    def end(self) -> int:
        """Where the lines read from the file end (the next one starts)."""
        return self._ends[-1]

    # -- reading back ----------------------------------------------------------------
    def _changed(self, index: int, where: str) -> SessionCorruptError:
        return SessionCorruptError(
            self._source.path,
            index + 2,  # the header is line 1
            f"{where} changed on disk after {'it was' if where == 'it' else 'they were'} "
            "read and validated (the file was truncated or rewritten under this session)",
        )

    def _checked(self, index: int, line: bytes) -> bytes:
        at = (index - self._covered) * DIGEST_SIZE
        if _hash(line).digest() != self._digests[at : at + DIGEST_SIZE]:
            raise self._changed(index, "it")
        return line

    def _covered_bytes(self, index: int, last: int, ahead: int) -> tuple[int, bytes]:
        """Where the checked bytes start, and the whole blocks holding covered lines
        `index` .. `last` - 1 (and up to `ahead` bytes more), each block checked."""
        ends, limit = self._ends, self._ends[self._covered]
        low = ends[index] - ends[index] % BLOCK
        needed = min(limit, ends[last] - 1 + BLOCK - (ends[last] - 1) % BLOCK)
        high = min(limit, max(needed, low + ahead))
        data = self._source.read(low, high - low)
        first = low // BLOCK
        expected = self._blocks[first * BLOCK_DIGEST_SIZE : -(-high // BLOCK) * BLOCK_DIGEST_SIZE]
        found = block_digests(data)
        if len(data) != high - low or found != expected:
            # The first line of the first block that changed (or is gone) is named.
            bad = next(
                (
                    k
                    for k in range(0, len(found), BLOCK_DIGEST_SIZE)
                    if found[k : k + BLOCK_DIGEST_SIZE] != expected[k : k + BLOCK_DIGEST_SIZE]
                ),
                len(found) - BLOCK_DIGEST_SIZE,
            )
            at = low + bad // BLOCK_DIGEST_SIZE * BLOCK
            if at >= needed:  # only what was read ahead: not needed yet
                return low, data[: at - low]
            raise self._changed(
                max(index, bisect_right(ends, at) - 1),
                f"bytes {at}-{min(at + BLOCK, limit)} of the file, which hold it,",
            )
        return low, data

    def _covered_line(self, index: int) -> bytes:
        start, end = self._ends[index], self._ends[index + 1] - 1
        low, data = self._cache
        if not (low <= start and end < low + len(data)):
            low, data = self._cache = self._covered_bytes(index, index + 1, READ_AHEAD)
        return data[start - low : end - low]

    def __getitem__(self, index: int) -> bytes:
        inside = len(self._ends) - 1
        if index < 0:
            index += len(self)
        if 0 <= index < self._covered:
            return self._covered_line(index)
        if 0 <= index < inside:
            start = self._ends[index]
            size = self._ends[index + 1] - 1 - start
            return self._checked(index, self._source.read(start, size))
        if index < 0:
            raise IndexError(index)
        return self._more[index - inside]

    def __iter__(self) -> Iterator[bytes]:
        """Every line, the file's read a few MB at a time (not one `pread` per line)."""
        ends = self._ends
        index, inside, covered = 0, len(ends) - 1, self._covered
        while index < covered:
            last = min(covered, max(index + 1, bisect_right(ends, ends[index] + CHUNK) - 1))
            low, data = self._covered_bytes(index, last, 0)
            for k in range(index, last):
                yield data[ends[k] - low : ends[k + 1] - 1 - low]
            index = last
        if index < inside:
            # The scan's memory map (register row "scan-map"); a line whose bytes moved
            # or are gone fails its digest. A file cut short ends the scan early: the
            # bytes after its last LF are the next line (whole if the cut took only its
            # LF), and any line after that is missing, an error at the first of them.
            tail: list[bytes] = []
            for line in self._source.lines(ends[index], ends[inside], tail):
                if index == inside:
                    break
                yield self._checked(index, line)
                index += 1
            if index < inside:
                yield self._checked(index, tail[0] if tail else b"")
                if index + 1 < inside:
                    raise self._changed(index + 1, "it")
        yield from self._more

    def append(self, line: bytes) -> None:
        self._more.append(line)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Lines):
            other = list(other)
        return list(self) == other if isinstance(other, list) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like the list it stands for

    def copy(self) -> Lines:
        lines = Lines(self._source, ends=self._ends, blocks=self._blocks)
        lines._covered, lines._digests = self._covered, self._digests
        lines._more = list(self._more)
        return lines

    def sizes(self) -> list[int]:
        """Each line's size in the file, its LF included."""
        ends = self._ends
        inside = list(map(sub, ends[1:], ends[:-1]))
        more = self._more
        # A line read from the file has no LF; one committed holds it.
        return inside + list(map(add, map(len, more), map(not_, map(_ends_line, more))))

    def pieces(self) -> Iterator[bytes]:
        """The lines' bytes as the file holds them, every LF included (each read back
        checked: a snapshot's MAC never vouches for bytes that were not validated)."""
        for line in self:
            yield line
            if line[-1:] != b"\n":
                yield b"\n"
