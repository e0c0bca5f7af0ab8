"""The transaction lines of a session state: where each lies in the file, read back on
use and checked against the block digests the read took (docs/session-format.md §8.1).
Lines this process commits stay in memory as written: small beside a long history.

# perf: register row "lines-on-disk" (docs/benchmarks.md)
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterator
from itertools import islice

from . import _source
from ._exceptions import SessionCorruptError
from ._source import BLOCK, BLOCK_DIGEST_SIZE, Source, block_digests

# A read of one covered line reads (and checks) READ_AHEAD bytes of blocks at once.
READ_AHEAD = 1 << 20


class Lines:
    """The lines read from the file (`ends`, checked by `blocks`, read back from
    `source`), then those committed by this process (`more`, LF included)."""

    __slots__ = (
        "__weakref__",
        "_blocks",
        "_cache",
        "_covered",
        "_ends",
        "_more",
        "_source",
    )

    def __init__(
        self,
        source: Source | None = None,
        start: int = 0,
        ends: array[int] | None = None,
        blocks: bytes = b"",
    ) -> None:
        self._source = source if source is not None else Source("<memory>")
        self._source.hold(self)
        # Line i of the file is bytes ends[i] .. ends[i + 1] - 1 (its LF excluded). Only
        # the load appends here; copies share them afterwards.
        self._ends = array("q", (start,)) if ends is None else ends
        self._covered = len(self._ends) - 1  # lines checked by `blocks`
        self._blocks = blocks  # of the file's bytes 0 .. ends[covered], BLOCK at a time
        self._more: list[bytes] = []
        self._cache = (0, b"")  # the covered bytes last read and checked, and where

    def close(self) -> None:
        """Let go of the source (its descriptor closes with its last holder); reading
        these lines back is refused from here on."""
        source = self._source
        source.release(self)
        if not source.closed:
            self._source = Source(source.path)
            self._source.close()

    def __len__(self) -> int:
        return len(self._ends) - 1 + len(self._more)

    # -- what the load adds ----------------------------------------------------------
    def add_scanned(self, line: bytes) -> None:
        """The next line of a full read, validated by the caller."""
        ends = self._ends
        ends.append(ends[-1] + len(line) + 1)

    def cover(self, blocks: bytes) -> None:
        """The lines read so far are checked by `blocks` (`Scan.blocks`)."""
        assert not self._more
        self._covered = len(self._ends) - 1
        self._blocks = blocks

    def end(self) -> int:
        """Where the lines read from the file end (the next one starts)."""
        return self._ends[-1]

    # -- reading back ----------------------------------------------------------------
    def _changed(self, index: int, where: str) -> SessionCorruptError:
        return SessionCorruptError(
            self._source.path,
            index + 2,  # the header is line 1
            f"{where} changed on disk after they were read and validated (the file was "
            "truncated or rewritten under this session)",
        )

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
        if 0 <= index < inside:
            return self._covered_line(index)
        if index < 0:
            raise IndexError(index)
        return self._more[index - inside]

    def __iter__(self) -> Iterator[bytes]:
        """Every line, the file's read a few MB at a time (not one `pread` per line)."""
        ends = self._ends
        index, covered = 0, self._covered
        while index < covered:
            last = min(covered, max(index + 1, bisect_right(ends, ends[index] + _source.CHUNK) - 1))
            low, data = self._covered_bytes(index, last, 0)
            for k in range(index, last):
                yield data[ends[k] - low : ends[k + 1] - 1 - low]
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
        lines = Lines(self._source, ends=self._ends, blocks=self._blocks)
        lines._covered = self._covered
        lines._more = list(self._more)
        return lines

    def pieces(self, count: int | None = None) -> Iterator[bytes]:
        """The first `count` lines' bytes (None: all) as the file holds them, every LF
        included."""
        for line in islice(self, count):
            yield line
            if line[-1:] != b"\n":
                yield b"\n"
