"""The grep tool (replay policy `safeRead`): search text files for a regular expression.

Like the other reading tools it may be replayed after a crash while a notebook loads,
so it must end whatever the pattern and files: the search runs in a forked child that
is killed at the time limit (`run_in_child`; why a child, not a linear-time engine, is
said in _limits.py), and reads each line in a bounded number of bytes.
"""

from __future__ import annotations

import os
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import BinaryIO, ClassVar

from pydantic import Field

from ..session import ReplayPolicy
from ._base import ToolArguments, ToolContext, ToolError, ToolOutput
from ._builtin import BuiltinTool, describe_os_error, display_path
from ._limits import DEFAULT_TIME_LIMIT, Deadline, run_in_child
from ._output import truncate
from ._paths import confine, is_inside, open_file, walk, workspace_root
from ._read import looks_binary, missing

MAX_GREP_MATCHES = 200
MAX_GREP_LINE = 400  # characters of one matching line shown (minified files are one line)
# Bytes of one line searched: a 200 MB line must not be read into memory, and past this
# a match is rarely a line anyone wants shown. The rest of such a line is skipped.
MAX_SEARCHED_LINE = 1 << 20
_SNIFF_BYTES = 8192


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
        f"are skipped. At most {MAX_GREP_MATCHES} matches; only the first "
        f"{MAX_SEARCHED_LINE // (1 << 20)} MiB of a line is searched; stops after "
        f"{DEFAULT_TIME_LIMIT:g} seconds."
    )
    replay_policy: ClassVar[ReplayPolicy] = "safeRead"
    Arguments = GrepArguments

    def __init__(self, time_limit: float = DEFAULT_TIME_LIMIT) -> None:
        self.time_limit = time_limit

    def execute(self, arguments: GrepArguments, context: ToolContext) -> ToolOutput:
        try:
            regex = re.compile(arguments.pattern, re.IGNORECASE if arguments.ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {arguments.pattern!r}: {exc}") from None
        root = workspace_root(context)
        top = confine(arguments.path, context)
        if not top.exists():
            raise missing(top)
        deadline = Deadline(
            self.time_limit,
            "Narrow the search (path, glob) or simplify the pattern: nested repeats such "
            "as (a+)+ can take forever on a long line.",
        )
        search = _Search(regex, root, arguments.glob, deadline)
        matches = run_in_child(lambda: search.run(top), deadline)
        assert isinstance(matches, list)  # what _Search.run returns, through JSON
        if not matches:
            where = display_path(top, root)
            return ToolOutput(f"[no matches for {arguments.pattern!r} in {where}]")
        return ToolOutput(truncate("\n".join(matches), context.output_limit))


class _Search:
    """The work done in the child: walk, open, search; the result lines."""

    def __init__(
        self, regex: re.Pattern[str], root: Path, glob: str | None, deadline: Deadline
    ) -> None:
        self._regex = regex
        self._root = root
        self._glob = glob
        self._deadline = deadline
        self._matches: list[str] = []

    def run(self, top: Path) -> list[str]:
        if not top.is_dir():
            try:
                self._file(top, top)
            except OSError as exc:
                raise ToolError(describe_os_error(exc, self._root)) from None
            return self._capped()
        unreadable = 0
        for entry in walk(top, self._root, recursive=True, deadline=self._deadline):
            if entry.kind != "file":
                continue
            if self._glob is not None and not fnmatchcase(entry.path.name, self._glob):
                continue
            # A symlink the walk reports as a file leads inside; open where it leads.
            # (islink, not Path.is_symlink: a path beyond PATH_MAX is not an error here.)
            link = os.path.islink(entry.path)  # noqa: PTH114 - see above
            real = Path(os.path.realpath(entry.path)) if link else entry.path
            if not is_inside(real, self._root):
                continue
            try:
                self._file(real, entry.path)
            except ToolError:
                continue  # a pipe, socket or device: not text to search, and could block
            except OSError:
                unreadable += 1  # e.g. permission denied: the other files still count
            if len(self._matches) > MAX_GREP_MATCHES:
                break
        matches = self._capped()
        if unreadable:
            matches.append(f"[{unreadable} file(s) could not be read]")
        return matches

    def _capped(self) -> list[str]:
        if len(self._matches) <= MAX_GREP_MATCHES:
            return self._matches
        stop = f"[stopped at {MAX_GREP_MATCHES} matches; narrow the search]"
        return [*self._matches[:MAX_GREP_MATCHES], stop]

    def _file(self, real: Path, named: Path) -> None:
        """Append this file's matching lines; stops once the cap is exceeded."""
        shown = display_path(named, self._root)
        with open(open_file(real, self._root, shown, os.O_RDONLY), "rb") as stream:
            if looks_binary(stream.read(_SNIFF_BYTES)):
                return
            stream.seek(0)
            number = 0
            while raw := stream.readline(MAX_SEARCHED_LINE):
                number += 1
                if not raw.endswith(b"\n"):
                    self._skip_line(stream)
                self._deadline.check()
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if self._regex.search(line):
                    if len(line) > MAX_GREP_LINE:
                        line = line[:MAX_GREP_LINE] + " [...]"
                    self._matches.append(f"{shown}:{number}: {line}")
                    if len(self._matches) > MAX_GREP_MATCHES:
                        return

    def _skip_line(self, stream: BinaryIO) -> None:
        """Read past the rest of an overlong line, a bounded piece at a time."""
        while (piece := stream.readline(MAX_SEARCHED_LINE)) and not piece.endswith(b"\n"):
            self._deadline.check()
