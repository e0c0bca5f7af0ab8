"""Confinement: file tools act only inside the workspace.

A path is judged by where it *really* leads (`os.path.realpath`), so `../x`, `/etc/passwd`,
`link-to-etc/passwd` and `inside/../../x` are refused, while an absolute path or a symlink
that lands inside is fine. Tools then act on the resolved path, never on the name given.

A directory swapped for a symlink between that check and the open (by the agent's own
bash, or anyone) cannot redirect a file tool either: `open_file` walks from the workspace
one component at a time with O_NOFOLLOW, relative to the directory it has open (the openat
way), and `walk` checks that each directory it enters is the one it listed. Not covered
(the README says so): hard links, and bash and python, which run as the user.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from ._base import OutsideWorkspaceError, ToolContext, ToolError, display_path
from ._limits import Deadline
from ._names import printable_path, unescape_path

# Directories a recursive walk lists but does not enter: their contents are rarely what
# the model is looking for, and they would crowd out everything else under the caps.
SKIPPED_DIRECTORIES = frozenset(
    {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".mypy_cache",
     ".ruff_cache", ".pytest_cache", ".ipynb_checkpoints"}
)  # fmt: skip


def workspace_root(context: ToolContext) -> Path:
    # Resolved again: a caller that passed e.g. a /tmp symlink must not make every path
    # look "outside".
    return Path(os.path.realpath(context.workspace))


def confine(path: str, context: ToolContext) -> Path:
    """The real path `path` leads to, if it is inside the workspace."""
    if "\0" in path:
        raise ToolError(f"{path!r}: a path cannot contain a NUL character")
    try:
        os.fsencode(path)
    except UnicodeEncodeError:  # a lone surrogate from a JSON \ud800 escape
        raise ToolError(f"{path!r}: not a usable file name (invalid Unicode)") from None
    root = workspace_root(context)
    # os.path, not Path.expanduser: an unknown ~user stays a plain name instead of raising.
    given = root / os.path.expanduser(unescape_path(path))  # noqa: PTH111
    real = Path(os.path.realpath(given))
    if not is_inside(real, root):
        via = "through a symlink " if os.path.normpath(given) != str(real) else ""
        raise OutsideWorkspaceError(
            f"{printable_path(path)}: refused, it leads {via}to {printable_path(str(real))}, "
            f"outside the workspace {printable_path(str(root))}. "
            "File tools only act inside the workspace; use a path inside it."
        )
    return real


def file_target(path: str, context: ToolContext, *, if_directory: str) -> tuple[Path, str]:
    """The confined real path of a file argument and how to show it; a directory is
    refused with `if_directory` as the advice."""
    real = confine(path, context)
    shown = display_path(real, workspace_root(context))
    if real.is_dir():
        raise ToolError(f"{shown}: is a directory; {if_directory}")
    return real, shown


def is_inside(real: Path, root: Path) -> bool:
    return real == root or root in real.parents


# Never follow a link (the path was resolved already; a link now is a swap since the
# check), never block on a pipe's open, never leak the descriptor into bash's children.
_NO_SURPRISES = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_file(real: Path, root: Path, shown: str, flags: int, *, make_parents: bool = False) -> int:
    """A descriptor for the regular file at `real` (a confined real path); every file
    tool opens through here. Refused with a ToolError: a pipe, socket or device (it could
    block the tool, or a replay after a crash, forever), and a path on which a component
    became a symlink after `confine` resolved it."""
    parts = real.relative_to(root).parts
    if not parts:
        raise ToolError(f"{shown}: is a directory")
    try:
        directory = parent_directory(root, parts, make=make_parents)
        try:
            return _open_regular(directory, parts[-1], shown, flags)
        finally:
            os.close(directory)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _swapped(shown) from None
        if exc.errno == errno.ENOTDIR and make_parents:
            raise ToolError(f"{shown}: cannot be created, a parent on its path is a file") from None
        # The OS names only the last component it was given; name the whole path.
        raise OSError(exc.errno, exc.strerror, str(real)) from None


def parent_directory(root: Path, parts: Sequence[str], *, make: bool) -> int:
    """A descriptor of the directory holding the file `parts` names under `root`, entered
    one name at a time, never through a symlink; `make`: missing directories are created.
    OSError: ELOOP where a name on the way is a symlink, ENOTDIR where it is a file."""
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            try:
                try:
                    inner = os.open(name, _DIRECTORY, dir_fd=directory)
                except FileNotFoundError:
                    if not make:
                        raise
                    # Another writer may create it at the same moment; either way it exists.
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=directory)
                    inner = os.open(name, _DIRECTORY, dir_fd=directory)
            except NotADirectoryError:
                if stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, "a symbolic link on the path", name) from None
                raise
            os.close(directory)
            directory = inner
    except BaseException:
        os.close(directory)
        raise
    return directory


def _open_regular(directory: int, name: str, shown: str, flags: int) -> int:
    # Looked at before opening, because opening a device can itself act (a tape
    # rewinds); checked again on the open descriptor, which is what will be used.
    try:
        before = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            raise
    else:
        _refuse_special(before.st_mode, shown)
    try:
        fd = os.open(name, flags | _NO_SURPRISES, 0o666, dir_fd=directory)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _swapped(shown) from None
        if exc.errno == errno.ENXIO:  # a pipe with no reader, opened for writing
            raise ToolError(not_regular(shown)) from None
        raise
    try:
        _refuse_special(os.fstat(fd).st_mode, shown)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refuse_special(mode: int, shown: str) -> None:
    if stat.S_ISLNK(mode):
        raise _swapped(shown)
    if stat.S_ISDIR(mode):
        raise ToolError(f"{shown}: is a directory")
    if not stat.S_ISREG(mode):
        raise ToolError(not_regular(shown))


def not_regular(shown: str) -> str:
    return (
        f"{shown}: not a regular file (a pipe, socket or device); refused, it was neither "
        "read nor written (either could block or act on a device). File tools only act "
        "on regular files; use bash if you really mean it."
    )


def _swapped(shown: str) -> ToolError:
    return ToolError(
        f"{shown}: refused, a directory or file on its path was replaced by a symbolic "
        "link while the tool ran; nothing was read or written. Look at the path again."
    )


class Entry(NamedTuple):
    path: Path
    kind: Literal["file", "directory", "outside"]  # outside: a symlink leading out


class _Listed(NamedTuple):
    name: str
    kind: Literal["file", "directory", "symlink"]
    identity: tuple[int, int] | None  # (st_dev, st_ino) of a directory, as listed


# A directory is opened relative to the nearest one held open, by a relative path kept
# well under PATH_MAX (4096): a tree deeper than that is walked to the bottom while
# holding one descriptor per ~1000 characters of depth, not one per level.
_HOLD_AFTER = 1024


def walk(top: Path, root: Path, *, recursive: bool, deadline: Deadline) -> Iterator[Entry]:
    """Entries under `top`, sorted by name, depth first, never reading outside `root`.
    Symlinked directories are listed, not entered (a cycle of links would never end); one
    leading outside is reported as such and its target never examined. Iterative, through
    relative opens: a tree deeper than the recursion limit or PATH_MAX is fine."""
    held: list[int] = []  # directories kept open to open below, deepest last
    # Per directory on the current path: its path, its entries left, and its path below
    # the deepest held directory (None: held itself), a string: Path.relative_to would
    # cost the whole depth at every level.
    pending: list[tuple[Path, Iterator[_Listed], str | None]] = []

    def enter(path: Path, below: str, identity: tuple[int, int] | None) -> None:
        fd = _open_directory(held[-1] if held else None, below, identity)
        if fd is None:
            return
        hold = not held or len(below) >= _HOLD_AFTER
        if hold:
            held.append(fd)
        try:
            pending.append((path, iter(_list(fd, deadline)), None if hold else below))
        finally:
            if not hold:
                os.close(fd)

    try:
        enter(top, str(top), None)
        while pending:
            directory, entries, below = pending[-1]
            listed = next(entries, None)
            if listed is None:
                pending.pop()
                if below is None:
                    os.close(held.pop())
                continue
            deadline.check()
            path = directory / listed.name
            if listed.kind == "symlink":
                target = Path(os.path.realpath(path))
                if not is_inside(target, root):
                    yield Entry(path, "outside")
                else:
                    yield Entry(path, "directory" if target.is_dir() else "file")
                continue
            yield Entry(path, listed.kind)
            if listed.kind == "directory" and recursive and listed.name not in SKIPPED_DIRECTORIES:
                enter(path, f"{below}/{listed.name}" if below else listed.name, listed.identity)
    finally:
        for fd in held:
            os.close(fd)


def _open_directory(above: int | None, below: str, identity: tuple[int, int] | None) -> int | None:
    """A descriptor of directory `below` (relative to the descriptor `above`), or None
    if it cannot be opened or is no longer the directory that was listed (`identity`):
    swapped, it or a directory on the way, for a symlink to elsewhere."""
    try:
        fd = os.open(below, _DIRECTORY, dir_fd=above)
    except OSError:
        return None  # unreadable or gone: one directory should not sink the listing
    now = os.fstat(fd)
    if identity is not None and (now.st_dev, now.st_ino) != identity:
        os.close(fd)
        return None
    return fd


def _list(fd: int, deadline: Deadline) -> list[_Listed]:
    """The sorted entries of the open directory `fd` (none if it cannot be read)."""
    listed: list[_Listed] = []
    try:
        with os.scandir(fd) as listing:
            for entry in listing:
                deadline.check()  # a directory of millions of entries is read lazily
                listed.append(_describe(entry))
    except OSError:
        return []
    return sorted(listed)


def _describe(entry: os.DirEntry[str]) -> _Listed:
    if entry.is_symlink():
        return _Listed(entry.name, "symlink", None)
    if entry.is_dir(follow_symlinks=False):
        # lstat, not the readdir inode: on a mount point only lstat matches a later fstat.
        info = entry.stat(follow_symlinks=False)
        return _Listed(entry.name, "directory", (info.st_dev, info.st_ino))
    return _Listed(entry.name, "file", None)
