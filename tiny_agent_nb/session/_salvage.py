"""Salvage (docs/session-format.md §5): the longest prefix of whole lines that loads,
found by the very reader loop of `load_session` (so it is exactly what a load accepts),
and what stays behind. Pure: bytes in, a result out; the caller writes the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ._framing import split_complete
from ._reader import Damage, reduce_bytes


@dataclass(frozen=True)
class SalvageResult:
    """What `salvage` kept and what it left behind; all sizes in bytes.

    `kept_bytes + bad_line_bytes + bytes_after + torn_tail_bytes == source_bytes`.
    """

    path: str
    data: bytes  # the salvaged prefix: whole LF-terminated lines, header first
    lines: int  # lines kept, the header included
    source_bytes: int  # size of the input
    bad_line: int | None  # 1-based number of the first line that does not load
    reason: str | None  # why it does not load (the error `load_session` gives)
    bad_line_bytes: int  # size of the bad line, its LF included
    lines_after: int  # complete lines after the bad line (not copied, whatever they hold)
    bytes_after: int  # their size, LFs included
    torn_tail_bytes: int  # bytes after the last LF (never copied)

    @property
    def kept_bytes(self) -> int:
        return len(self.data)

    @property
    def transactions(self) -> int:
        """Transactions kept: every kept line but the header."""
        return self.lines - 1

    @property
    def left_behind_bytes(self) -> int:
        return self.source_bytes - self.kept_bytes

    @property
    def complete(self) -> bool:
        """True when every complete line was kept (a torn tail is never a line)."""
        return self.bad_line is None


def salvage(data: bytes, path: str | Path) -> SalvageResult:
    """The longest prefix of whole lines of `data` that loads, and what it leaves behind.

    Raises NotASessionError when there is no complete header line, and
    SessionCorruptError (line 1) when the header is invalid: nothing can be salvaged.
    `path` only names the file in errors and in the result.
    """
    found: list[Damage] = []
    reduce_bytes(path, data, lambda: data, found.append)
    complete, torn = split_complete(data)
    if not found:
        kept_end = len(complete) + 1  # every complete line, the header included
        return SalvageResult(
            path=str(path),
            data=data[:kept_end],
            lines=complete.count(b"\n") + 1,
            source_bytes=len(data),
            bad_line=None,
            reason=None,
            bad_line_bytes=0,
            lines_after=0,
            bytes_after=0,
            torn_tail_bytes=torn,
        )
    damage = found[0]
    # `complete` has no final LF; every line in it is followed by one in `data`.
    bad_line_bytes = damage.size + 1
    after = damage.offset + bad_line_bytes  # where the lines after the bad one start
    rest = len(complete) + 1 - after  # their bytes, each with its LF
    return SalvageResult(
        path=str(path),
        data=data[: damage.offset],
        lines=damage.line - 1,
        source_bytes=len(data),
        bad_line=damage.line,
        reason=damage.reason,
        bad_line_bytes=bad_line_bytes,
        lines_after=complete.count(b"\n", after) + 1 if rest else 0,
        bytes_after=rest,
        torn_tail_bytes=torn,
    )
