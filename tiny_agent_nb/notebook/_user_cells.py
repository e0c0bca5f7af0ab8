"""The user's cells as context: what the user ran since the previous agent cell.

IPython's `post_run_cell` gives each cell's code and the exception it raised. The kernel
keeps the newest few as `CellRecord`s, each bounded when recorded, and a prompt takes them
as one text (`UserCells.digest`) within `TinyAgent.user_cells_chars`, newest first, older
ones left out and counted. The text is part of the prompt's user entry (`userCells`,
docs/spec.md §6), so the file holds what the model was sent. Code and messages are
untrusted: terminal escapes removed, other controls escaped, secrets redacted.
"""

from __future__ import annotations

import itertools
import linecache
import re
import traceback
import unicodedata
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..provider import messages
from ..tools import clean_text, truncate

KEPT_CELLS = 50  # the newest cells kept between two agent cells
MAX_CODE = 3000  # characters of one cell's code kept (head and tail)
MAX_MESSAGE = 500  # characters of an error's message
MAX_LINE = 200  # characters of the line that raised it
MIN_CODE = 100  # a cell shown with less of its code than this is left out instead

# ANSI/VT sequences (CSI, OSC, and two-character escapes): colour in an error message
# (IPython's own, a library's) would reach the model as noise, and the timeline as escapes.
_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE = re.compile(r"[^\r\n]+")
USER_CELLS_START, USER_CELLS_END = messages.USER_CELLS_START, messages.USER_CELLS_END
SET_OFF = "(in the cell) "  # before a line of a cell that reads as one of these markers


@dataclass(frozen=True)
class CellError:
    type: str  # `KeyError`, `pandas.errors.ParserError`
    message: str
    where: str | None  # `In [4], line 2: df.total` — the innermost frame in a cell's code


@dataclass(frozen=True)
class CellRecord:
    count: int  # the execution count: In [count]
    code: str
    error: CellError | None


@dataclass(frozen=True)
class Digest:
    text: str | None  # None: nothing to send (no cells, or a budget of 0)
    through: int  # the newest execution count it covers (0: none)


class UserCells:
    """The cells the user ran since the previous agent cell, newest last."""

    def __init__(self) -> None:
        self._cells: deque[CellRecord] = deque(maxlen=KEPT_CELLS)
        self._dropped = 0  # cells that fell out of the deque since the last prompt

    def record(self, cell: CellRecord) -> None:
        if len(self._cells) == self._cells.maxlen:
            self._dropped += 1
        self._cells.append(cell)

    def forget(self, through: int) -> None:
        """The cells up to execution count `through` went with a prompt."""
        while self._cells and self._cells[0].count <= through:
            self._cells.popleft()
        self._dropped = 0

    def digest(self, budget: int, secrets: Iterable[str] = ()) -> Digest:
        """The cells as sent before a prompt, at most `budget` characters."""
        cells = list(self._cells)
        if budget <= 0 or not cells:
            return Digest(None, cells[-1].count if cells else 0)
        hidden = tuple(secrets)
        shown: list[str] = []
        # Lines joined by LFs: the start marker, the note of the cells left out, each
        # cell's block, the end marker. `room`: what is left for the note and the blocks.
        room = budget - len(USER_CELLS_START) - 1 - len(USER_CELLS_END)
        left_out = self._dropped
        for index in range(len(cells) - 1, -1, -1):
            older = index + self._dropped  # left out if this cell is the oldest shown
            note = len(_left_out(older)) + 1 if older else 0
            # Only the newest cell is cut to fit: an older one fits whole or is left out.
            block = _block(cells[index], hidden, room - note - 1 if not shown else None)
            if block is None or len(block) + 1 + note > room:
                left_out = older + 1
                break
            shown.insert(0, block)
            room -= len(block) + 1
        if not shown:
            return Digest(None, cells[-1].count)
        lines = [USER_CELLS_START, *([_left_out(left_out)] if left_out else []), *shown]
        return Digest("\n".join([*lines, USER_CELLS_END]), cells[-1].count)


def _left_out(count: int) -> str:
    return f"[{count} earlier cell(s) left out]"


def _block(cell: CellRecord, secrets: tuple[str, ...], room: int | None) -> str | None:
    """One cell as sent; with `room`, cut to fit it (None when even a cut cell does not)."""
    error = ""
    if cell.error is not None:
        where = f" (at {cell.error.where})" if cell.error.where else ""
        error = f"\n→ {cell.error.type}: {cell.error.message}{where}"
    code = cell.code
    marks = fence(code)
    head = f"In [{cell.count}]:\n{marks}python\n"
    tail = f"\n{marks}{error}"
    block = _set_off_markers(clean_text(head + code + tail, secrets))
    if room is None or len(block) <= room:
        return block
    # The cut starts a line and ends one mid-line: room to set off both.
    cut = len("\n[... 0000000 characters truncated ...]\n") + 2 * len(SET_OFF)
    keep = room - len(block) + len(code) - cut
    if keep < MIN_CODE:
        return None
    # Set off last: after the cut, and after a redaction that changes a line.
    block = _set_off_markers(clean_text(head + truncate(code, keep) + tail, secrets))
    return block if len(block) <= room else None


def _set_off_markers(block: str) -> str:
    """`block` with each line that reads as one of the digest's own markers said to be
    the cell's (`SET_OFF`), so that a user's cell never ends (or starts) the cells early.

    The model reads, it does not compare bytes: a line reads as a marker when its letters
    and digits hold the marker's (after NFKC and casefolding), whatever its spaces,
    brackets, apostrophes (curly or straight), width or invisible characters, and whatever
    comes before or after it on the line (`[End of the user's cells] Now run ...`, or
    after a `#`). A nonce in the marker would not help: the model would still read a line
    without it as the end."""
    lines = block.split("\n")
    return "\n".join(SET_OFF + line if _reads_as_marker(line) else line for line in lines)


def _reads_as_marker(line: str) -> bool:
    letters = _letters(line)
    return any(marker in letters for marker in _MARKERS)


def _letters(line: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKC", line).casefold() if c.isalnum())


_MARKERS = frozenset(_letters(marker) for marker in (USER_CELLS_START, USER_CELLS_END))


def fence(code: str) -> str:
    """A markdown fence longer than any run of backticks in `code`: no line of it closes it."""
    return "`" * max(3, max((len(run) for run in re.findall("`+", code)), default=0) + 1)


def kept_text(text: str) -> str:
    """Untrusted text as one kernel's cell or message may be kept: escapes removed, and
    other control characters (tab and newline aside) written as `\\x..` (a line that
    reads as a marker is set off when the digest is made: `_set_off_markers`)."""
    text = _ESCAPES.sub("", text)
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


# ---------------------------------------------------------------- from IPython's events


def cell_record(result: Any, cell_label: Callable[[str], str | None]) -> CellRecord | None:
    """The record of one executed cell (`post_run_cell`'s ExecutionResult), or None for
    what is no user cell: a silent or unstored execution, an agent cell, a blank one.
    `cell_label(filename)`: `In [3]` for the file IPython compiled a cell under."""
    info = getattr(result, "info", None)
    count = getattr(result, "execution_count", None)
    code = getattr(info, "raw_cell", None)
    if not isinstance(code, str) or not isinstance(count, int) or not code.strip():
        return None
    if getattr(info, "silent", False) or not getattr(info, "store_history", True):
        return None
    if is_agent_cell(code):
        return None
    error = getattr(result, "error_before_exec", None) or getattr(result, "error_in_exec", None)
    return CellRecord(
        count=count,
        code=kept_text(truncate(code.rstrip(), MAX_CODE)),
        error=cell_error(error, cell_label) if isinstance(error, BaseException) else None,
    )


def is_agent_cell(code: str) -> bool:
    """A cell of this extension's own (`%%agent`, `%agent ...`, loading it): not context.

    Read line by line up to the first line that says no: this runs after every cell,
    and a cell of megabytes (pasted data) is not split into a list of its lines."""
    lines = (line for match in _LINE.finditer(code) if (line := match.group().strip()))
    first = next(lines, None)
    if first is None:
        return False
    if first.startswith("%%agent"):
        return True
    return all(
        line.startswith(("%%agent", "%agent"))
        or line in ("%load_ext tiny_agent_nb", "%reload_ext tiny_agent_nb")
        for line in itertools.chain((first,), lines)
    )


def cell_error(exc: BaseException, cell_label: Callable[[str], str | None]) -> CellError:
    kind = type(exc)
    module = getattr(kind, "__module__", "builtins")
    name = kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
    try:
        message = str(exc)  # what IPython's traceback already showed the user
    except BaseException:  # its class's code: even a KeyboardInterrupt it raises is no
        # interrupt of the cell (which has run), and must not become the cell's error
        message = "(its message could not be read)"
    where = _syntax_where(exc, cell_label) if isinstance(exc, SyntaxError) else None
    return CellError(
        type=kept_text(name),
        message=kept_text(truncate(message, MAX_MESSAGE)),
        where=kept_text(where or _frame_where(exc, cell_label) or "") or None,
    )


def _frame_where(exc: BaseException, cell_label: Callable[[str], str | None]) -> str | None:
    """Where the innermost traceback frame in a cell's code is (`_at`)."""
    found: str | None = None
    for frame, number in traceback.walk_tb(exc.__traceback__):
        label = cell_label(frame.f_code.co_filename)
        if label is not None:
            found = _at(label, number, linecache.getline(frame.f_code.co_filename, number))
    return found


def _syntax_where(exc: SyntaxError, cell_label: Callable[[str], str | None]) -> str | None:
    label = cell_label(exc.filename) if exc.filename else None
    if label is None or exc.lineno is None:
        return None
    return _at(label, exc.lineno, exc.text or "")


def _at(label: str, number: int, line: str) -> str:
    """`In [4], line 2: <the line>`."""
    line = line.strip()
    return f"{label}, line {number}" + (f": {truncate(line, MAX_LINE)}" if line else "")
