"""The writing tools: write_file and edit_file (replay policy `never`), and the file
history they keep (docs/spec.md, "File history").

Each reads its file before the intent (`prepare`, as the cell tools read a cell) and
computes the bytes it will write; both go to the session's file store
(`ToolContext.file_store`), and the intent's arguments record their digests as "file":
what a rewind restores, and checks before it overwrites. `execute` writes exactly those
bytes, and only if the file still holds what was read: an edit made in between, by the
user or another process, is never clobbered. Past a cap, or with no store, the write still
happens and the record says `kept: false` and why, never silently. After a crash these
calls are marked interrupted, never run again: their effect may have happened.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, ClassVar, TypeVar, cast

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from ..session import FileStore, FileStoreError
from ._base import (
    BuiltinTool,
    ToolArguments,
    ToolContext,
    ToolError,
    ToolOutput,
    describe_os_error,
)
from ._files import looks_binary
from ._paths import file_target, open_file, workspace_root

_CHUNK = 1 << 16
CHANGED = "changed since this call was asked; nothing written. Read it again."


class FileChange(ToolArguments):
    """A writing call's "file" member: the file as read before the intent, and what it
    will hold after (digests: `sha256:<hex>`; `before` None: no file was there)."""

    path: str  # as shown to the model: workspace-relative, escaped
    before: str | None
    after: str
    mode: int | None  # st_mode & 0o7777 of the file before
    kept: bool  # both blobs are in the session's file store
    why: str | None = None  # only when not kept: which cap, or no store


class FileArguments(ToolArguments):
    path: str
    # Filled in before the intent from the disk; a value the model sends is dropped.
    file: SkipJsonSchema[FileChange | None] = None


FileArgumentsT = TypeVar("FileArgumentsT", bound=FileArguments)


class _Writing(BuiltinTool[FileArgumentsT]):
    """What write_file and edit_file share: the read before the intent, the checked write."""

    # Whether `new_content` needs the bytes before (edit_file) or only their digest: a file
    # too large for the store is then hashed, not held.
    reads_before: ClassVar[bool] = False

    def new_content(
        self, arguments: FileArgumentsT, before: bytes | None, shown: str
    ) -> tuple[bytes, str]:
        """The bytes the file will hold, and the result the model is told."""
        raise NotImplementedError

    def effective_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Without "file": only the disk says what the file holds, not the model."""
        effective = super().effective_arguments(arguments)
        effective.pop("file", None)
        return effective

    def prepare(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        parsed = cast(FileArgumentsT, self.parse_arguments(arguments))
        store = context.file_store
        try:
            real, shown = file_target(parsed.path, context, if_directory="give the path of a file")
            fd = open_file(real, workspace_root(context), shown, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):  # a file on the path: execute says so
            digest, before, mode = None, None, None
        except OSError as exc:
            raise ToolError(describe_os_error(exc, context.workspace)) from None
        else:
            with open(fd, "rb") as stream:
                mode = os.fstat(fd).st_mode & 0o7777
                keep = -1 if self.reads_before else 0 if store is None else store.max_file
                digest, before = _read(stream, keep)
        after, _ = self.new_content(parsed, before, shown)
        change: dict[str, Any] = {
            "path": shown,
            "before": digest,
            "after": FileStore.digest(after),
            "mode": mode,
        }
        why = _keep(store, digest, before, after)
        change["kept"] = why is None
        if why is not None:
            change["why"] = why
        return {**arguments, "file": change}

    def execute(self, arguments: FileArgumentsT, context: ToolContext) -> ToolOutput:
        if arguments.file is None:  # run without prepare (a direct call): read it now
            prepared = self.prepare(arguments.model_dump(), context)
            arguments = cast(FileArgumentsT, self.parse_arguments(prepared))
        file = arguments.file
        assert file is not None
        real, shown = file_target(arguments.path, context, if_directory="give the path of a file")
        if shown != file.path:
            raise ToolError(f"{shown}: the path leads elsewhere now; {CHANGED}")
        # New: created only if still absent (O_EXCL). Else: the open descriptor is read,
        # checked and written, so no rename in between can make it write another file.
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if file.before is None else 0)
        try:
            fd = open_file(real, workspace_root(context), shown, flags, make_parents=True)
        except (FileExistsError, FileNotFoundError):
            raise ToolError(f"{shown}: {CHANGED}") from None
        with open(fd, "r+b") as stream:
            before = None
            if file.before is not None:
                digest, before = _read(stream, -1 if self.reads_before else 0)
                if digest != file.before:
                    raise ToolError(f"{shown}: {CHANGED}")
            after, said = self.new_content(arguments, before, shown)
            stream.seek(0)
            stream.truncate()
            stream.write(after)
        return ToolOutput(said)


def _read(stream: Any, keep: int) -> tuple[str, bytes | None]:
    """The digest of the rest of `stream`, and its bytes if no more than `keep` (-1: all):
    a file too large to keep is hashed, not held."""
    sha = hashlib.sha256()
    chunks: list[bytes] = []
    size = 0
    while chunk := stream.read(_CHUNK):
        sha.update(chunk)
        size += len(chunk)
        if keep < 0 or size <= keep:
            chunks.append(chunk)
    held = keep < 0 or size <= keep
    return "sha256:" + sha.hexdigest(), b"".join(chunks) if held else None


def _keep(
    store: FileStore | None, digest: str | None, before: bytes | None, after: bytes
) -> str | None:
    """Put the before and after bytes in `store`; None if both are kept, else why not."""
    if store is None:
        return "no file store: this runtime keeps no file history"
    if digest is not None and before is None:
        return f"the file was larger than the per-file cap of {store.max_file} bytes"
    blobs = [after] if before is None else [before, after]
    why = store.fits(*blobs)
    if why is None:
        try:
            for data in blobs:
                store.put(data)
        except (OSError, FileStoreError) as exc:
            return f"the file store could not keep it: {exc}"
    return why


class WriteFileArguments(FileArguments):
    path: str = Field(description="File to write, relative to the workspace root.")
    content: str = Field(description="The whole new content of the file.")


class WriteFile(_Writing[WriteFileArguments]):
    name = "write_file"
    description = (
        "Create or overwrite a file in the workspace with the given content (UTF-8). "
        "Missing parent directories are created. Prefer edit_file for changing part of a file."
    )
    Arguments = WriteFileArguments

    def new_content(
        self, arguments: WriteFileArguments, before: bytes | None, shown: str
    ) -> tuple[bytes, str]:
        data = arguments.content.encode("utf-8")
        # What was there is the record's (`before` is not held for a file too large to keep).
        created = arguments.file is None or arguments.file.before is None
        return data, f"{'created' if created else 'overwrote'} {shown}: wrote {len(data)} bytes"


class EditFileArguments(FileArguments):
    path: str = Field(description="File to edit, relative to the workspace root.")
    old_string: str = Field(
        description="Exact text to replace; it must occur exactly once in the file "
        "(include surrounding lines to make it unique)."
    )
    new_string: str = Field(description="Text to put in its place.")


class EditFile(_Writing[EditFileArguments]):
    name = "edit_file"
    description = (
        "Replace one exact occurrence of old_string with new_string in a text file in the "
        "workspace. If old_string occurs zero times or more than once, nothing is written."
    )
    Arguments = EditFileArguments
    reads_before = True

    def new_content(
        self, arguments: EditFileArguments, before: bytes | None, shown: str
    ) -> tuple[bytes, str]:
        old, new = arguments.old_string, arguments.new_string
        if not old:
            raise ToolError("old_string is empty; give the exact text to replace")
        if old == new:
            raise ToolError("old_string and new_string are the same; nothing to change")
        if before is None:
            raise ToolError(f"{shown}: no such file or directory")
        text = _text(before, shown)
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
        after = text.replace(old, new, 1).encode("utf-8")
        return after, f"edited {shown}: replaced 1 occurrence at line {line}"


def _text(data: bytes, shown: str) -> str:
    if looks_binary(data):
        raise ToolError(f"{shown}: binary file; edit_file only edits text")
    try:
        # Strict: a lossy decode would write replacement characters back to the file.
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{shown}: not valid UTF-8; edit_file only edits UTF-8 text") from None
