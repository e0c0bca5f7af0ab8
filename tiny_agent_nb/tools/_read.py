"""The reading tools read_file and list_files (replay policy `safeRead`; grep is in
_grep.py).

They change nothing, so after a crash the planner may run them again instead of
marking them interrupted (docs/spec.md §2.1): while a notebook loads its session. So whatever
the file or tree, each holds a bounded amount of memory and stops at its time limit
(_limits.py). Every path goes through `confine`, every file is opened by `open_file`.
"""

from __future__ import annotations

import errno
import os
from fnmatch import fnmatchcase
from pathlib import Path
from typing import BinaryIO, ClassVar

from pydantic import Field

from ..session import ReplayPolicy
from ._base import ToolArguments, ToolContext, ToolError, ToolOutput
from ._builtin import BuiltinTool, display_path, file_target
from ._limits import DEFAULT_TIME_LIMIT, Deadline
from ._output import CappedOutput, truncate
from ._paths import Entry, confine, open_file, walk, workspace_root

MAX_LIST_ENTRIES = 1000
_SNIFF_BYTES = 8192
_CHUNK = 1 << 16  # bytes read at a time; small enough that malloc reuses, not maps, them


def looks_binary(head: bytes) -> bool:
    """A NUL byte early in the file: what git and grep take to mean "not text"."""
    return b"\0" in head[:_SNIFF_BYTES]


def missing(real: Path) -> OSError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(real))


# ---------------------------------------------------------------- read_file


class ReadFileArguments(ToolArguments):
    path: str = Field(description="File to read, relative to the workspace root.")
    offset: int = Field(1, ge=1, description="First line to show (1-based).")
    limit: int | None = Field(None, ge=1, description="How many lines to show (default: all).")


class ReadFile(BuiltinTool[ReadFileArguments]):
    name = "read_file"
    description = (
        "Read a text file in the workspace. The first line of the result says which lines "
        "are shown and how many the file has; use offset/limit to page through large files. "
        f"Stops after {DEFAULT_TIME_LIMIT:g} seconds."
    )
    replay_policy: ClassVar[ReplayPolicy] = "safeRead"
    Arguments = ReadFileArguments

    def __init__(self, time_limit: float = DEFAULT_TIME_LIMIT) -> None:
        self.time_limit = time_limit

    def execute(self, arguments: ReadFileArguments, context: ToolContext) -> ToolOutput:
        real, shown = file_target(
            arguments.path, context, if_directory="use list_files to see what it holds"
        )
        deadline = Deadline(
            # Every line is counted whatever the range, so a smaller range would not help.
            self.time_limit,
            "The file is too large to read in time; look at part of it with bash "
            "(e.g. `head -c 100000 FILE`).",
        )
        fd = open_file(real, workspace_root(context), shown, os.O_RDONLY)
        with open(fd, "rb") as stream:
            head = stream.read(_SNIFF_BYTES)
            if looks_binary(head):
                size = os.fstat(fd).st_size
                raise ToolError(
                    f"{shown}: binary file ({size} bytes), not shown; read_file only "
                    f"reads text (inspect it with bash, e.g. `xxd {shown} | head`)"
                )
            window = _Window(arguments.offset - 1, arguments.limit, context.output_limit)
            total = window.scan(head, stream, deadline)
        if total == 0:
            return ToolOutput(f"[{shown}: empty file, 0 lines]")
        if arguments.offset > total:
            raise ToolError(f"{shown}: offset {arguments.offset} is past the end ({total} lines)")
        start = arguments.offset - 1
        end = total if arguments.limit is None else min(total, start + arguments.limit)
        if start == 0 and end == total:
            header = f"[{shown}: {total} lines]"
        else:
            header = f"[{shown}: lines {start + 1}-{end} of {total}]"
        if window.text.total > context.output_limit:
            header += " (cut to fit; read a smaller range with offset/limit)"
        return ToolOutput(f"{header}\n{window.text.text()}")


class _Window:
    """Lines `first` .. `first + limit` of a file read chunk by chunk, as the text the
    model is sent (lines as grep counts them: split on "\\n" only, no phantom line
    after the last), and the file's line count.

    Memory stays bounded whatever the file: one chunk, and the head and tail of the
    window in a CappedOutput, which gives exactly what truncating the whole window
    would. A 200 MB file of one line is read, not held.
    """

    def __init__(self, first: int, limit: int | None, output_limit: int) -> None:
        self.text = CappedOutput(output_limit)
        self._first = first
        self._end = None if limit is None else first + limit
        self._line = 0  # index of the line being read: the newlines seen so far
        self._newline_pending = False  # the window's last newline, held back

    def scan(self, data: bytes, stream: BinaryIO, deadline: Deadline) -> int:
        last = b""
        while data:
            deadline.check()
            self._take(data)
            last = data[-1:]
            data = stream.read(_CHUNK)
        # A last line without a newline still counts.
        return self._line + (1 if last not in (b"", b"\n") else 0)

    def _take(self, data: bytes) -> None:
        position = 0
        if self._line < self._first:
            position = self._skip(data, self._first - self._line)
        if position < len(data) and (self._end is None or self._line < self._end):
            rest = data[position:]
            wanted = None if self._end is None else self._end - self._line
            if wanted is not None and rest.count(b"\n") >= wanted:
                rest = rest[: _after_newline(rest, 0, wanted)]
            self._show(rest)
            position += len(rest)
            self._line += rest.count(b"\n")
        self._line += data.count(b"\n", position)

    def _skip(self, data: bytes, lines: int) -> int:
        """Where the data goes on after `lines` more newlines (or its end)."""
        found = data.count(b"\n")
        if found < lines:
            self._line += found
            return len(data)
        self._line += lines
        return _after_newline(data, 0, lines)

    def _show(self, span: bytes) -> None:
        if not span:
            return
        # Bytes after a newline mean another line: the held-back newline separates them.
        if self._newline_pending:
            self.text.feed(b"\n")
        self._newline_pending = span.endswith(b"\n")
        self.text.feed(span[:-1] if self._newline_pending else span)


def _after_newline(data: bytes, start: int, count: int) -> int:
    """The index just after the `count`-th newline of data[start:] (there are enough)."""
    # split runs in C; the pieces are at most one chunk in total.
    *_, rest = data[start:].split(b"\n", count)
    return len(data) - len(rest)


# ---------------------------------------------------------------- list_files


class ListFilesArguments(ToolArguments):
    path: str = Field(".", description="Directory to list, relative to the workspace root.")
    pattern: str | None = Field(
        None,
        description=(
            "Glob that entries must match, e.g. '*.py'. Matched against the name, or "
            "against the path below `path` when it contains '/'."
        ),
    )
    recursive: bool = Field(False, description="Also list the contents of subdirectories.")


class ListFiles(BuiltinTool[ListFilesArguments]):
    name = "list_files"
    description = (
        "List a directory in the workspace: one path per line, relative to the workspace "
        "root, directories ending in '/'. Recursive listings do not enter .git, "
        f"node_modules, virtualenvs or caches. At most {MAX_LIST_ENTRIES} entries; stops "
        f"after {DEFAULT_TIME_LIMIT:g} seconds. Names that are not plain printable text are "
        "shown escaped (\\n, \\xff for a byte that is not UTF-8, \\\\ for a backslash) "
        "and can be passed to the file tools as shown."
    )
    replay_policy: ClassVar[ReplayPolicy] = "safeRead"
    Arguments = ListFilesArguments

    def __init__(self, time_limit: float = DEFAULT_TIME_LIMIT) -> None:
        self.time_limit = time_limit

    def execute(self, arguments: ListFilesArguments, context: ToolContext) -> ToolOutput:
        root = workspace_root(context)
        top = confine(arguments.path, context)
        if not top.exists():
            raise missing(top)
        if not top.is_dir():
            return ToolOutput(display_path(top, root))
        deadline = Deadline(
            self.time_limit, "List a smaller part (path), or without recursive, or use bash."
        )
        out: list[str] = []
        for entry in walk(top, root, recursive=arguments.recursive, deadline=deadline):
            if arguments.pattern is not None and not _matches(entry.path, top, arguments.pattern):
                continue
            if len(out) == MAX_LIST_ENTRIES:
                out.append(
                    f"[stopped at {MAX_LIST_ENTRIES} entries; narrow it with path or pattern]"
                )
                break
            out.append(_describe(entry, root))
        if not out:
            where = display_path(top, root)
            what = f"nothing matches {arguments.pattern!r}" if arguments.pattern else "empty"
            return ToolOutput(f"[{where}: {what}]")
        return ToolOutput(truncate("\n".join(out), context.output_limit))


def _matches(path: Path, top: Path, pattern: str) -> bool:
    subject = path.relative_to(top).as_posix() if "/" in pattern else path.name
    return fnmatchcase(subject, pattern)


def _describe(entry: Entry, root: Path) -> str:
    shown = display_path(entry.path, root)
    if entry.kind == "directory":
        return shown + "/"
    if entry.kind == "outside":
        return f"{shown} (symlink leading outside the workspace)"
    return shown
