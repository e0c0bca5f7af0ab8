"""The reading tools: read_file, list_files, grep (replay policy `safeRead`).

They change nothing, so after a crash the planner may run them again instead of
marking them interrupted (DESIGN §6). Every path goes through `confine`.
"""

from __future__ import annotations

import errno
import os
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from ..session._models import ReplayPolicy
from ._base import ToolArguments, ToolContext, ToolError, ToolOutput
from ._builtin import BuiltinTool, display_path, file_target
from ._output import truncate
from ._paths import Entry, confine, walk, workspace_root

MAX_LIST_ENTRIES = 1000
MAX_GREP_MATCHES = 200
MAX_GREP_LINE = 400  # characters of one matching line shown (minified files are one line)
_SNIFF_BYTES = 8192


def looks_binary(head: bytes) -> bool:
    """A NUL byte early in the file: what git and grep take to mean "not text"."""
    return b"\0" in head[:_SNIFF_BYTES]


def missing(real: Path) -> OSError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(real))


def split_lines(text: str) -> list[str]:
    """Lines as grep counts them: split on "\\n" only, no phantom line after the last."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


# ---------------------------------------------------------------- read_file


class ReadFileArguments(ToolArguments):
    path: str = Field(description="File to read, relative to the workspace root.")
    offset: int = Field(1, ge=1, description="First line to show (1-based).")
    limit: int | None = Field(None, ge=1, description="How many lines to show (default: all).")


# Opening a named pipe waits for a writer that may never come: a read-only tool must
# never block, above all when it is replayed while a notebook loads its session.
_NOT_REGULAR = "{}: not a regular file (a pipe, socket or device); not read, it could block"


class ReadFile(BuiltinTool[ReadFileArguments]):
    name = "read_file"
    description = (
        "Read a text file in the workspace. The first line of the result says which lines "
        "are shown and how many the file has; use offset/limit to page through large files."
    )
    replay_policy: ClassVar[ReplayPolicy] = "safeRead"
    Arguments = ReadFileArguments

    def execute(self, arguments: ReadFileArguments, context: ToolContext) -> ToolOutput:
        real, shown = file_target(
            arguments.path, context, if_directory="use list_files to see what it holds"
        )
        if real.exists() and not real.is_file():
            raise ToolError(_NOT_REGULAR.format(shown))
        data = real.read_bytes()
        if looks_binary(data):
            raise ToolError(
                f"{shown}: binary file ({len(data)} bytes), not shown; read_file only "
                "reads text (inspect it with bash, e.g. `xxd {shown} | head`)"
            )
        lines = split_lines(data.decode("utf-8", errors="replace"))
        total = len(lines)
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
        body = "\n".join(lines[start:end])
        text = truncate(body, context.output_limit)
        if text != body:
            header += " (cut to fit; read a smaller range with offset/limit)"
        return ToolOutput(f"{header}\n{text}")


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
        f"node_modules, virtualenvs or caches. At most {MAX_LIST_ENTRIES} entries."
    )
    replay_policy: ClassVar[ReplayPolicy] = "safeRead"
    Arguments = ListFilesArguments

    def execute(self, arguments: ListFilesArguments, context: ToolContext) -> ToolOutput:
        root = workspace_root(context)
        top = confine(arguments.path, context)
        if not top.exists():
            raise missing(top)
        if not top.is_dir():
            return ToolOutput(display_path(top, root))
        out: list[str] = []
        for entry in walk(top, root, recursive=arguments.recursive):
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


# ---------------------------------------------------------------- grep


class GrepArguments(ToolArguments):
    pattern: str = Field(description="Regular expression (Python `re` syntax) to search for.")
    path: str = Field(".", description="File or directory to search, relative to the workspace.")
    glob: str | None = Field(None, description="Only search files whose name matches, e.g. '*.py'.")
    ignore_case: bool = Field(False, description="Match regardless of case.")


class Grep(BuiltinTool[GrepArguments]):
    name = "grep"
    description = (
        "Search text files in the workspace for a regular expression. Each match is one "
        "line 'path:line: text'. Binary files, .git, node_modules, virtualenvs and caches "
        f"are skipped. At most {MAX_GREP_MATCHES} matches."
    )
    replay_policy: ClassVar[ReplayPolicy] = "safeRead"
    Arguments = GrepArguments

    def execute(self, arguments: GrepArguments, context: ToolContext) -> ToolOutput:
        try:
            regex = re.compile(arguments.pattern, re.IGNORECASE if arguments.ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {arguments.pattern!r}: {exc}") from None
        root = workspace_root(context)
        top = confine(arguments.path, context)
        if not top.exists():
            raise missing(top)
        if top.is_dir():
            files = [
                e.path
                for e in walk(top, root, recursive=True)
                if e.kind == "file"
                and (arguments.glob is None or fnmatchcase(e.path.name, arguments.glob))
            ]
        elif top.is_file():
            files = [top]
        else:
            raise ToolError(_NOT_REGULAR.format(display_path(top, root)))
        # A pipe, socket or device would block the read (and a replay after a crash).
        files = [f for f in files if f.is_file()]
        matches: list[str] = []
        unreadable = 0
        for file in files:
            try:
                _search(file, regex, display_path(file, root), matches)
            except OSError:
                unreadable += 1  # e.g. permission denied: the other files still count
            if len(matches) > MAX_GREP_MATCHES:
                del matches[MAX_GREP_MATCHES:]
                matches.append(f"[stopped at {MAX_GREP_MATCHES} matches; narrow the search]")
                break
        if unreadable:
            matches.append(f"[{unreadable} file(s) could not be read]")
        if not matches:
            where = display_path(top, root)
            return ToolOutput(f"[no matches for {arguments.pattern!r} in {where}]")
        return ToolOutput(truncate("\n".join(matches), context.output_limit))


def _search(file: Path, regex: re.Pattern[str], shown: str, matches: list[str]) -> None:
    """Append this file's matching lines; stops once the cap is exceeded."""
    with open(file, "rb") as stream:
        if looks_binary(stream.read(_SNIFF_BYTES)):
            return
        stream.seek(0)
        # Streamed line by line: a multi-gigabyte log must not be read into memory.
        for number, raw in enumerate(stream, start=1):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if regex.search(line):
                if len(line) > MAX_GREP_LINE:
                    line = line[:MAX_GREP_LINE] + " [...]"
                matches.append(f"{shown}:{number}: {line}")
                if len(matches) > MAX_GREP_MATCHES:
                    return
