"""The reading file tools: read_file, list_files, grep (replay policy `safeRead`); the
writing ones are in _writing.py.

They change nothing, so after a crash the planner may run them again while a notebook
loads its session (docs/spec.md §2.1): whatever the file or tree, each holds a bounded
amount of memory and stops at its time limit (_limits.py). Every path goes through
`confine` or `file_target`, every file is opened by `open_file`: regular files only,
never through a symlink swapped in.
"""

from __future__ import annotations

import os
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import BinaryIO, ClassVar

from pydantic import Field

from ..session import ReplayPolicy
from ..words import byte_size
from ._base import (
    ArgumentsT,
    BuiltinTool,
    ToolArguments,
    ToolContext,
    ToolError,
    ToolOutput,
    describe_os_error,
    display_path,
)
from ._limits import DEFAULT_TIME_LIMIT, CappedOutput, Deadline, run_in_child, truncate
from ._paths import Entry, confine, file_target, is_inside, open_file, walk, workspace_root

MAX_LIST_ENTRIES = 1000
MAX_GREP_MATCHES = 200
MAX_GREP_LINE = 400  # characters of one matching line shown (minified files are one line)
# Bytes of one line searched: a 200 MB line must not be read into memory, and past this
# a match is rarely a line anyone wants shown. The rest of such a line is skipped.
MAX_SEARCHED_LINE = 1 << 20
_SNIFF_BYTES = 8192
_CHUNK = 1 << 16  # bytes read at a time; small enough that malloc reuses, not maps, them


def looks_binary(head: bytes) -> bool:
    """A NUL byte early in the file: what git and grep take to mean "not text"."""
    return b"\0" in head[:_SNIFF_BYTES]


class _Reading(BuiltinTool[ArgumentsT]):
    """A reading tool: replayed after a crash, so it stops at `time_limit`."""

    replay_policy: ClassVar[ReplayPolicy] = "safeRead"

    def __init__(self, time_limit: float = DEFAULT_TIME_LIMIT) -> None:
        self.time_limit = time_limit


class ReadFileArguments(ToolArguments):
    path: str = Field(description="File to read, relative to the workspace root.")
    offset: int = Field(1, ge=1, description="First line to show (1-based).")
    limit: int | None = Field(None, ge=1, description="How many lines to show (default: all).")


class ReadFile(_Reading[ReadFileArguments]):
    name = "read_file"
    description = (
        "Read a text file in the workspace. The first line of the result says which lines "
        "are shown and how many the file has; use offset/limit to page through large files. "
        f"Stops after {DEFAULT_TIME_LIMIT:g} seconds."
    )
    Arguments = ReadFileArguments

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
            start = arguments.offset - 1
            end = None if arguments.limit is None else start + arguments.limit
            text = CappedOutput(context.output_limit)
            stream.seek(0)
            total = _scan(stream, start, end, text=text, deadline=deadline)
        if total == 0:
            return ToolOutput(f"[{shown}: empty file, 0 lines]")
        if arguments.offset > total:
            raise ToolError(f"{shown}: offset {arguments.offset} is past the end ({total} lines)")
        end = total if end is None else min(total, end)
        if start == 0 and end == total:
            header = f"[{shown}: {total} lines]"
        else:
            header = f"[{shown}: lines {start + 1}-{end} of {total}]"
        if text.total > context.output_limit:
            header += " (cut to fit; read a smaller range with offset/limit)"
        return ToolOutput(f"{header}\n{text.text()}")


def _scan(
    stream: BinaryIO, first: int, end: int | None, *, text: CappedOutput, deadline: Deadline
) -> int:
    """Feed lines `first` .. `end` of the file to `text` as the model is sent them, and
    count the file's lines: split on "\\n" only, as grep counts them, no phantom line
    after the last. Memory stays bounded: one chunk, and what `text` holds. A 200 MB file
    of one line is read, not held."""
    line = 0  # the newlines seen so far: the index of the line being read
    pending = False  # the window's last newline, held back
    last = b""
    while data := stream.read(_CHUNK):
        deadline.check()
        start = _after(data, first - line)
        span = data[start : len(data) if end is None else _after(data, end - line)]
        if span:
            # Bytes after a newline mean another line: the held-back newline separates them.
            if pending:
                text.feed(b"\n")
            pending = span.endswith(b"\n")
            text.feed(span[:-1] if pending else span)
        line += data.count(b"\n")
        last = data[-1:]
    return line + (last not in (b"", b"\n"))  # a last line without a newline counts


def _after(data: bytes, newlines: int) -> int:
    """The index just after the `newlines`-th newline of `data`, or its end if fewer."""
    if newlines <= 0:
        return 0
    if data.count(b"\n") < newlines:
        return len(data)
    *_, rest = data.split(b"\n", newlines)  # in C; at most one chunk
    return len(data) - len(rest)


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


class ListFiles(_Reading[ListFilesArguments]):
    name = "list_files"
    description = (
        "List a directory in the workspace: one path per line, relative to the workspace "
        "root, directories ending in '/'. Recursive listings do not enter .git, "
        f"node_modules, virtualenvs or caches. At most {MAX_LIST_ENTRIES} entries; stops "
        f"after {DEFAULT_TIME_LIMIT:g} seconds. Names that are not plain printable text are "
        "shown escaped (\\n, \\xff for a byte that is not UTF-8, \\\\ for a backslash) "
        "and can be passed to the file tools as shown."
    )
    Arguments = ListFilesArguments

    def execute(self, arguments: ListFilesArguments, context: ToolContext) -> ToolOutput:
        root = workspace_root(context)
        top = confine(arguments.path, context)
        top.stat()  # not there: FileNotFoundError, naming it
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


class GrepArguments(ToolArguments):
    pattern: str = Field(description="Regular expression (Python `re` syntax) to search for.")
    path: str = Field(".", description="File or directory to search, relative to the workspace.")
    glob: str | None = Field(None, description="Only search files whose name matches, e.g. '*.py'.")
    ignore_case: bool = Field(False, description="Match regardless of case.")


class Grep(_Reading[GrepArguments]):
    name = "grep"
    description = (
        "Search text files in the workspace for a regular expression. Each match is one "
        "line 'path:line: text'. Binary files, .git, node_modules, virtualenvs and caches "
        f"are skipped. At most {MAX_GREP_MATCHES} matches; only the first "
        f"{byte_size(MAX_SEARCHED_LINE)} of a line is searched; stops after "
        f"{DEFAULT_TIME_LIMIT:g} seconds."
    )
    Arguments = GrepArguments

    def execute(self, arguments: GrepArguments, context: ToolContext) -> ToolOutput:
        try:
            regex = re.compile(arguments.pattern, re.IGNORECASE if arguments.ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {arguments.pattern!r}: {exc}") from None
        root = workspace_root(context)
        top = confine(arguments.path, context)
        top.stat()  # not there: FileNotFoundError, naming it
        deadline = Deadline(
            self.time_limit,
            "Narrow the search (path, glob) or simplify the pattern: nested repeats such "
            "as (a+)+ can take forever on a long line.",
        )
        matches = run_in_child(
            lambda: _search(top, regex, root, arguments.glob, deadline), deadline
        )
        assert isinstance(matches, list)  # what _search returns, through JSON
        if not matches:
            where = display_path(top, root)
            return ToolOutput(f"[no matches for {arguments.pattern!r} in {where}]")
        return ToolOutput(truncate("\n".join(matches), context.output_limit))


def _search(
    top: Path, regex: re.Pattern[str], root: Path, glob: str | None, deadline: Deadline
) -> list[str]:
    """The work done in the child: walk, open, search; the result lines."""
    matches: list[str] = []

    def search(real: Path, named: Path) -> None:
        """Append this file's matching lines; stops once the cap is exceeded."""
        shown = display_path(named, root)
        with open(open_file(real, root, shown, os.O_RDONLY), "rb") as stream:
            if looks_binary(stream.read(_SNIFF_BYTES)):
                return
            stream.seek(0)
            number = 0
            while raw := stream.readline(MAX_SEARCHED_LINE):
                number += 1
                if not raw.endswith(b"\n"):  # read past the rest, a bounded piece at a time
                    while (piece := stream.readline(MAX_SEARCHED_LINE)) and piece[-1:] != b"\n":
                        deadline.check()
                deadline.check()
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if regex.search(line):
                    if len(line) > MAX_GREP_LINE:
                        line = line[:MAX_GREP_LINE] + " [...]"
                    matches.append(f"{shown}:{number}: {line}")
                    if len(matches) > MAX_GREP_MATCHES:
                        return

    if not top.is_dir():
        try:
            search(top, top)
        except OSError as exc:
            raise ToolError(describe_os_error(exc, root)) from None
        return _capped(matches)
    unreadable = 0
    for entry in walk(top, root, recursive=True, deadline=deadline):
        if entry.kind != "file" or (glob is not None and not fnmatchcase(entry.path.name, glob)):
            continue
        # A symlink the walk reports as a file leads inside; open where it leads.
        # (islink, not Path.is_symlink: a path beyond PATH_MAX is not an error here.)
        link = os.path.islink(entry.path)  # noqa: PTH114 - see above
        real = Path(os.path.realpath(entry.path)) if link else entry.path
        if not is_inside(real, root):
            continue
        try:
            search(real, entry.path)
        except ToolError:
            continue  # a pipe, socket or device: not text to search, and could block
        except OSError:
            unreadable += 1  # e.g. permission denied: the other files still count
        if len(matches) > MAX_GREP_MATCHES:
            break
    return _capped(matches) + ([f"[{unreadable} file(s) could not be read]"] if unreadable else [])


def _capped(matches: list[str]) -> list[str]:
    if len(matches) <= MAX_GREP_MATCHES:
        return matches
    stop = f"[stopped at {MAX_GREP_MATCHES} matches; narrow the search]"
    return [*matches[:MAX_GREP_MATCHES], stop]
