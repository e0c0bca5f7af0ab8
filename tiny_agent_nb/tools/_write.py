"""The writing tools: write_file, edit_file (replay policy `never`).

An edit whose effect may already have happened must not run twice, so after a crash the
planner marks these interrupted rather than repeating them (docs/spec.md §2.1). edit_file
therefore refuses anything ambiguous before touching the file: it writes exactly once
or not at all. Both open through `open_file`: regular files only (a pipe would block the
write forever, a device is not a file to edit), never through a symlink swapped in.
"""

from __future__ import annotations

import os
from typing import ClassVar

from pydantic import Field

from ..session import ReplayPolicy
from ._base import ToolArguments, ToolContext, ToolError, ToolOutput
from ._builtin import BuiltinTool, file_target
from ._paths import open_file, workspace_root
from ._read import looks_binary


class WriteFileArguments(ToolArguments):
    path: str = Field(description="File to write, relative to the workspace root.")
    content: str = Field(description="The whole new content of the file.")


class WriteFile(BuiltinTool[WriteFileArguments]):
    name = "write_file"
    description = (
        "Create or overwrite a file in the workspace with the given content (UTF-8). "
        "Missing parent directories are created. Prefer edit_file for changing part of a file."
    )
    replay_policy: ClassVar[ReplayPolicy] = "never"
    Arguments = WriteFileArguments

    def execute(self, arguments: WriteFileArguments, context: ToolContext) -> ToolOutput:
        real, shown = file_target(arguments.path, context, if_directory="give the path of a file")
        existed = os.path.lexists(real)
        # Parents are created inside the workspace, one component at a time, never
        # through a symlink (open_file); truncated only once known to be a regular file.
        fd = open_file(
            real, workspace_root(context), shown, os.O_WRONLY | os.O_CREAT, make_parents=True
        )
        data = arguments.content.encode("utf-8")
        with open(fd, "wb") as stream:
            stream.truncate(0)
            stream.write(data)
        verb = "overwrote" if existed else "created"
        return ToolOutput(f"{verb} {shown}: wrote {len(data)} bytes")


class EditFileArguments(ToolArguments):
    path: str = Field(description="File to edit, relative to the workspace root.")
    old_string: str = Field(
        description="Exact text to replace; it must occur exactly once in the file "
        "(include surrounding lines to make it unique)."
    )
    new_string: str = Field(description="Text to put in its place.")


class EditFile(BuiltinTool[EditFileArguments]):
    name = "edit_file"
    description = (
        "Replace one exact occurrence of old_string with new_string in a text file in the "
        "workspace. If old_string occurs zero times or more than once, nothing is written."
    )
    replay_policy: ClassVar[ReplayPolicy] = "never"
    Arguments = EditFileArguments

    def execute(self, arguments: EditFileArguments, context: ToolContext) -> ToolOutput:
        real, shown = file_target(arguments.path, context, if_directory="give the path of a file")
        old, new = arguments.old_string, arguments.new_string
        if not old:
            raise ToolError("old_string is empty; give the exact text to replace")
        if old == new:
            raise ToolError("old_string and new_string are the same; nothing to change")
        fd = open_file(real, workspace_root(context), shown, os.O_RDWR)
        with open(fd, "r+b") as stream:
            text = _text(stream.read(), shown)
            count = text.count(old)
            if count != 1:
                found = "not found" if count == 0 else f"found {count} times"
                hint = (
                    "read the file to copy the exact text"
                    if count == 0
                    else "include more surrounding text to make it unique"
                )
                raise ToolError(
                    f"{shown}: old_string {found}, must occur exactly once; {hint}. "
                    "Nothing was written."
                )
            line = text.count("\n", 0, text.index(old)) + 1
            stream.seek(0)
            stream.truncate()
            stream.write(text.replace(old, new, 1).encode("utf-8"))
        return ToolOutput(f"edited {shown}: replaced 1 occurrence at line {line}")


def _text(data: bytes, shown: str) -> str:
    if looks_binary(data):
        raise ToolError(f"{shown}: binary file; edit_file only edits text")
    try:
        # Strict: a lossy decode would write replacement characters back to the file.
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{shown}: not valid UTF-8; edit_file only edits UTF-8 text") from None
