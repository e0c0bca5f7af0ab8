"""The one place where a built-in tool's failure becomes a result the model sees.

Built-in tools implement `execute` with their typed arguments and simply raise: a
`ToolError` (message already written for the model) or whatever `OSError` the file
system gives. `run` translates both, so no tool repeats the try/except and every
"file not found" reads the same; a `ToolTimeoutError` also sets `timed_out`. Anything
else is a bug and is left to the agent loop; KeyboardInterrupt (a BaseException) always
passes through.
"""

from __future__ import annotations

import errno
import os
from abc import abstractmethod
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from ._base import Tool, ToolArguments, ToolContext, ToolError, ToolOutput
from ._limits import ToolTimeoutError
from ._names import printable_path
from ._paths import confine, workspace_root

ArgumentsT = TypeVar("ArgumentsT", bound=ToolArguments)


class BuiltinTool(Tool, Generic[ArgumentsT]):
    """A tool shipped with tiny-agent-nb (identity source `builtin`, version "1")."""

    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        try:
            # `Arguments` is the model this subclass is parametrised with (a ClassVar
            # cannot name a type variable, hence the cast).
            parsed = cast(ArgumentsT, self.parse_arguments(arguments))
            return self.execute(parsed, context)
        except ToolTimeoutError as exc:
            return ToolOutput(f"{self.name} {exc}", is_error=True, timed_out=True)
        except ToolError as exc:
            return ToolOutput(str(exc), is_error=True)
        except OSError as exc:
            return ToolOutput(describe_os_error(exc, context.workspace), is_error=True)

    @abstractmethod
    def execute(self, arguments: ArgumentsT, context: ToolContext) -> ToolOutput:
        """Perform the effect; raise ToolError / OSError for failures the model should see."""


_PLAIN = {
    errno.ENOENT: "no such file or directory",
    errno.EISDIR: "is a directory",
    errno.ENOTDIR: "not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EEXIST: "already exists",
    errno.ENOSPC: "no space left on device",
    errno.EROFS: "read-only file system",
}


def describe_os_error(exc: OSError, workspace: Path) -> str:
    """`<path>: <what went wrong>`, with the path as the model would write it."""
    what = _PLAIN.get(exc.errno or 0) or exc.strerror or str(exc)
    if exc.filename is None:
        return what
    return f"{display_path(os.fsdecode(exc.filename), workspace)}: {what}"


def display_path(path: str | Path, workspace: Path) -> str:
    """A path relative to the workspace when it lies inside it, else as given; escaped
    (`printable_path`) so that it is one line and tells every name apart."""
    try:
        relative = Path(path).relative_to(workspace)
    except ValueError:
        return printable_path(str(path))
    return printable_path(relative.as_posix()) or "."


def file_target(path: str, context: ToolContext, *, if_directory: str) -> tuple[Path, str]:
    """The confined real path of a file argument and how to show it; a directory is
    refused with `if_directory` as the advice."""
    real = confine(path, context)
    shown = display_path(real, workspace_root(context))
    if real.is_dir():
        raise ToolError(f"{shown}: is a directory; {if_directory}")
    return real, shown
