"""A rewind carried out (docs/spec.md §17), intent before effect: the `rewind` operation
is committed before any file changes; per file, what is there now goes into the file
store and a `fileRestore` record is committed, then the file is replaced atomically
(a temporary file in the same directory, fsynced, renamed over it; the directory
fsynced). A kernel killed anywhere leaves every file wholly old or wholly new, and an
open rewind the next load settles `interrupted` and reports (`interrupted_rewind`).

Files are reached from the workspace one directory descriptor at a time, never through a
symlink: a path whose parent or itself became a symlink, a directory or anything but a
regular file is a conflict, left as it is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, NamedTuple

from .._exceptions import TinyAgentError
from ..session import FileStore, SessionState, SessionStore, new_id
from ..session import facts as f
from ..tools import Notebook, parent_directory, unescape_path
from ._rewind_cells import restore_cells

if TYPE_CHECKING:
    from ._rewind import RewindPlan

_CHUNK = 1 << 20


class Found(NamedTuple):
    """A regular file's content and mode (`st_mode & 0o7777`), or None and None: none."""

    data: bytes | None
    mode: int | None


def digest_of(data: bytes | None) -> str | None:
    return None if data is None else FileStore.digest(data)


def _parts(relative: str) -> tuple[str, ...] | str:
    """The names on the way to `relative`: a path as recorded, escaped as the model is
    shown it (`printable_path`: one line, every name told apart), so unescaped here."""
    relative = unescape_path(relative)
    parts = PurePosixPath(relative).parts
    if not parts or parts[0] == "/" or ".." in parts or "\0" in relative:
        return "not a path inside the workspace"
    return parts


def _directory(root: Path, parts: tuple[str, ...], *, make: bool) -> int | str | None:
    """A descriptor of the directory holding the file `parts` names; None when it is
    missing (and not `make`); words when a component is no directory (a symlink?)."""
    try:
        return parent_directory(root, parts, make=make)
    except OSError as exc:
        if exc.filename == str(root):  # the recorded workspace is gone, or was moved
            return f"the workspace {root} cannot be reached: {exc.strerror}"
        if isinstance(exc, FileNotFoundError) and not make:
            return None
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            return "a directory on its path became a symlink or a file"
        return f"it cannot be reached: {exc.strerror}"


def _read(directory: int, name: str) -> Found | str:
    try:
        st = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return Found(None, None)
    except OSError as exc:  # a name too long, a directory it may not search
        return f"it cannot be read: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return "it became a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "it became a directory"
    if not stat.S_ISREG(st.st_mode):
        return "it is no regular file now"
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory
        )
    except OSError as exc:
        return f"it cannot be read: {exc.strerror}"
    try:
        chunks = []
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
        return Found(b"".join(chunks), stat.S_IMODE(os.fstat(fd).st_mode))
    finally:
        os.close(fd)


def look(root: Path, relative: str) -> Found | str:
    """The file at `relative` under `root` now; words when it cannot be a rewind's."""
    parts = _parts(relative)
    if isinstance(parts, str):
        return parts
    directory = _directory(root, parts, make=False)
    if directory is None or isinstance(directory, str):
        return Found(None, None) if directory is None else directory
    try:
        return _read(directory, parts[-1])
    finally:
        os.close(directory)


def _temporary(name: str) -> str:
    """The start of a temporary file's name beside `name`: cut so that it fits NAME_MAX."""
    return f".{name[:200]}.rewind-"


def _remove_temporaries(root: Path, relative: str) -> None:
    """Remove what a replace killed before its rename left beside `relative`."""
    parts = _parts(relative)
    directory = None if isinstance(parts, str) else _directory(root, parts, make=False)
    if not isinstance(directory, int):
        return
    prefix = _temporary(parts[-1])
    try:
        with os.scandir(directory) as entries:
            names = [entry.name for entry in entries]
        for name in names:
            if name.startswith(prefix) and re.fullmatch("[0-9a-f]{8}", name[len(prefix) :]):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=directory)
    finally:
        os.close(directory)


class _Conflict(TinyAgentError):
    """The file changed between the plan and its restore; it is left as it is."""


def replace(
    root: Path, relative: str, expected: str | None, data: bytes | None, mode: int | None
) -> None:
    """Put `data` (None: no file) at `relative`, atomically, if it still holds the
    content whose digest is `expected`; _Conflict otherwise."""
    parts = _parts(relative)
    if isinstance(parts, str):
        raise _Conflict(parts)
    directory = _directory(root, parts, make=data is not None)
    if isinstance(directory, str):
        raise _Conflict(directory)
    if directory is None:  # its directory is gone, and so is the file: nothing to remove
        if expected is not None:
            raise _Conflict("its directory is gone")
        return
    name = parts[-1]
    try:
        found = _read(directory, name)
        if isinstance(found, str):
            raise _Conflict(found)
        if digest_of(found.data) != expected:
            raise _Conflict("it changed while the rewind ran")
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=directory)
        else:
            temp = _temporary(name) + secrets.token_hex(4)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temp, flags, 0o600, dir_fd=directory)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, 0o644 if mode is None else mode)
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                os.unlink(temp, dir_fd=directory)
                raise
            os.close(fd)
            os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
        os.fsync(directory)
    finally:
        os.close(directory)


@dataclass(frozen=True)
class RewindDone:
    operation_id: str
    restored: tuple[str, ...]
    left: tuple[str, ...]  # conflicts and what cannot be restored, with why
    cells: tuple[str, ...] = ()  # each cell restored or left, and why

    def text(self) -> str:
        lines = [f"Rewound: {len(self.restored)} file(s) restored."]
        lines += [f"  restored {path}" for path in self.restored]
        lines += [f"  left as it is: {why}" for why in self.left]
        lines += [f"  {cell}" for cell in self.cells]
        return "\n".join(lines)


def carry_out(
    store: SessionStore,
    plan: RewindPlan,
    files: FileStore,
    root: Path,
    notebook: Notebook | None = None,
) -> RewindDone:
    """Commit the rewind `plan` and restore its files, each checked again just before,
    then its cells through `notebook` (the cells' words are the operation's detail)."""
    operation_id = new_id()
    start = f.OperationStarted(
        operationId=operation_id,
        operationKind="rewind",
        inputEntryId=None,
        rewindsOperationId=plan.target.id,
    )
    store.commit([f.NewFact(start)])
    restored: list[str] = []
    left = [f"{p.path}: {p.note}" for p in plan.files if p.action in ("conflict", "unrestorable")]
    try:
        for step in plan.files:
            if not step.writes:
                continue
            data = None if step.target is None else files.get(step.target)
            now = look(root, step.path)
            planned = step.found
            if isinstance(now, str) or isinstance(planned, str) or now != planned:
                left.append(f"{step.path}: it changed since the plan was made")
                continue
            # Kept first, so a later rewind (or --undo) can bring it back.
            found = None if now.data is None else files.put(now.data)
            record = f.FileRestore(
                operationId=operation_id,
                path=step.path,
                from_=found,
                fromMode=now.mode,
                to=step.target,
                toMode=step.mode if step.target is not None else None,
            )
            store.commit([f.NewFact(record)])
            try:
                replace(root, step.path, found, data, step.mode)
            except _Conflict as exc:
                left.append(f"{step.path}: {exc}")
                continue
            restored.append(step.path)
        cells = tuple(restore_cells(notebook, plan.cells))
    except BaseException as exc:
        outcome = "aborted" if isinstance(exc, KeyboardInterrupt) else "failed"
        detail = f"stopped after {len(restored)} file(s) restored: {type(exc).__name__}: {exc}"
        store.commit([_finished(operation_id, outcome, detail)])
        raise
    detail = f"{len(restored)} file(s) restored" + (
        f"; left as they are: {', '.join(left)}" if left else ""
    )
    detail += "".join(f"; {cell}" for cell in cells)
    store.commit([_finished(operation_id, "completed", detail)])
    return RewindDone(operation_id, tuple(restored), tuple(left), cells)


def _finished(operation_id: str, outcome: str, detail: str) -> f.NewFact:
    return f.NewFact(f.OperationFinished(operationId=operation_id, outcome=outcome, detail=detail))  # type: ignore[arg-type]


def interrupted_rewind(state: SessionState, operation_id: str, root: Path) -> list[str]:
    """What a rewind a dead process left open did (docs/spec.md §17), once the load
    settled it: per file it recorded, restored or not, as the disk says now."""
    operations = list(state.operations)
    op = state.operations[operation_id]
    number = operations.index(op.rewinds_operation_id or "") + 1
    lines = [f"The previous kernel stopped during a rewind to before run {number}:"]
    for restore in state.file_restores.values():
        if restore.operation_id == operation_id:
            _remove_temporaries(root, restore.path)
            found = look(root, restore.path)
            digest = None if isinstance(found, str) else digest_of(found.data)
            done = {restore.to: "restored", restore.from_: "not restored"}
            lines.append(f"  {done.get(digest, 'changed since')}: {restore.path}")
    if len(lines) == 1:
        lines.append("  it had restored no file yet")
    lines.append(f"`%agent rewind {number}` finishes it (what is restored stays).")
    return lines
