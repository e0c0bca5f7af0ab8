"""The transaction lines of a session state: where each lies in the file, read back on use.

# perf: register row "lines-on-disk" (docs/benchmarks.md)
History's content stays in the session file, where it already is (docs/spec.md §14.1):
a state keeps, per line it read, where the line ends and an 8-byte BLAKE2b digest of
its bytes, taken while the line was validated. Reading a line back is a `pread` from the
state's own read-only descriptor, and its bytes must match that digest: a file truncated
or rewritten after the load raises SessionCorruptError naming the line, and never hands
out bytes nobody validated. Lines this process commits stay in memory (`more`) as
written: they are what a writer adds in one kernel, small beside a long history.
"""

from __future__ import annotations

import os
import weakref
from array import array
from collections.abc import Iterable, Iterator
from functools import partial
from hashlib import blake2b
from itertools import accumulate, repeat
from operator import add, methodcaller, not_, sub

from ._exceptions import SessionCorruptError

DIGEST_SIZE = 8
# A chunk of the file read at once: by the reader's scan, and by iteration over lines.
CHUNK = 1 << 22
_hash = partial(blake2b, digest_size=DIGEST_SIZE)
_digest = methodcaller("digest")
_ends_line = methodcaller("endswith", b"\n")


def digests_of(lines: Iterable[bytes | memoryview]) -> bytes:
    """The lines' digests, end to end (C-level maps: no Python call per line)."""
    return b"".join(map(_digest, map(_hash, lines)))


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

    def chunks(self, start: int, end: int) -> Iterator[bytes]:
        """The bytes from `start` to `end`, CHUNK at a time (fewer at the file's end)."""
        while start < end:
            chunk = self.read(start, min(CHUNK, end - start))
            if not chunk:
                return
            yield chunk
            start += len(chunk)


class Lines:
    """The transaction lines: those read from the file (`ends`, `digests`, read back
    from `source`), then those committed by this process (bytes, LF included, `more`)."""

    __slots__ = ("_digests", "_ends", "_more", "_source")

    def __init__(self, source: Source | None = None, start: int = 0) -> None:
        self._source = source if source is not None else Source("<memory>")
        # Line i of the file is bytes ends[i] .. ends[i + 1] - 1 (its LF excluded). Only
        # the load appends here; copies share them afterwards.
        self._ends = array("q", (start,))
        self._digests = bytearray()
        self._more: list[bytes] = []

    def __len__(self) -> int:
        return len(self._ends) - 1 + len(self._more)

    # -- what the load adds ----------------------------------------------------------
    def add_read(self, line: bytes) -> None:
        """The next line of the file (validated by the caller), as read."""
        self._ends.append(self._ends[-1] + len(line) + 1)
        self._digests += _hash(line).digest()

    def add_read_many(self, lines: list[bytes]) -> None:
        ends = accumulate(map(add, map(len, lines), repeat(1)), initial=self._ends[-1])
        next(ends)  # the initial value: already there
        self._ends.extend(ends)
        self._digests += digests_of(lines)

    def end(self) -> int:
        """Where the lines read from the file end (the next one starts)."""
        return self._ends[-1]

    # -- reading back ----------------------------------------------------------------
    def _checked(self, index: int, line: bytes) -> bytes:
        at = index * DIGEST_SIZE
        if _hash(line).digest() != self._digests[at : at + DIGEST_SIZE]:
            raise SessionCorruptError(
                self._source.path,
                index + 2,  # the header is line 1
                "its bytes changed on disk after they were read and validated "
                "(the file was truncated or rewritten under this session)",
            )
        return line

    def __getitem__(self, index: int) -> bytes:
        inside = len(self._ends) - 1
        if index < 0:
            index += len(self)
        if 0 <= index < inside:
            start = self._ends[index]
            size = self._ends[index + 1] - 1 - start
            return self._checked(index, self._source.read(start, size))
        if index < 0:
            raise IndexError(index)
        return self._more[index - inside]

    def __iter__(self) -> Iterator[bytes]:
        """Every line, the file's read a few MB at a time (not one `pread` per line)."""
        ends, read = self._ends, self._source.read
        index, inside = 0, len(ends) - 1
        while index < inside:
            first, last = index, index + 1  # lines first .. last - 1, one read
            while last < inside and ends[last + 1] - ends[first] <= CHUNK:
                last += 1
            block = read(ends[first], ends[last] - ends[first])
            base = ends[first]
            for k in range(first, last):
                yield self._checked(k, block[ends[k] - base : ends[k + 1] - 1 - base])
            index = last
        yield from self._more

    def append(self, line: bytes) -> None:
        self._more.append(line)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Lines):
            other = list(other)
        return list(self) == other if isinstance(other, list) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like the list it stands for

    def copy(self) -> Lines:
        lines = Lines(self._source)
        lines._ends, lines._digests = self._ends, self._digests
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
