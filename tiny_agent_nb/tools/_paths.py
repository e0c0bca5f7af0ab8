"""Confinement: file tools act only inside the workspace.

A path is judged by where it *really* leads: `os.path.realpath` resolves every symlink
component (and applies `..` after resolving, as the kernel does), so `../x`,
`/etc/passwd`, `link-to-etc/passwd` and `inside/../../x` are all refused, while an
absolute path that lands inside the workspace and a symlink whose target stays inside
are fine. Tools then act on the resolved path, never on the name they were given, so a
later lookup cannot be redirected by the link that was checked.

What this does not stop: a process outside the agent swapping a directory for a symlink
between the check and the open. The agent is the only writer it is meant to restrain,
and its bash and python tools are not confined anyway.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, NamedTuple

from ._base import OutsideWorkspaceError, ToolContext, ToolError

# Directories a recursive walk lists but does not enter: their contents are rarely what
# the model is looking for, and they would crowd out everything else under the caps.
SKIPPED_DIRECTORIES = frozenset(
    {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".mypy_cache",
     ".ruff_cache", ".pytest_cache", ".ipynb_checkpoints"}
)  # fmt: skip


def workspace_root(context: ToolContext) -> Path:
    # The context promises a realpath; resolving again costs little and keeps a caller
    # that passed e.g. a /tmp symlink from making every path look "outside".
    return Path(os.path.realpath(context.workspace))


def confine(path: str, context: ToolContext) -> Path:
    """The real path `path` leads to, if it is inside the workspace."""
    if "\0" in path:
        raise ToolError(f"{path!r}: a path cannot contain a NUL character")
    root = workspace_root(context)
    # os.path, not Path.expanduser: an unknown ~user stays a plain name instead of raising.
    given = Path(os.path.expanduser(path))  # noqa: PTH111
    real = Path(os.path.realpath(root / given))
    if not is_inside(real, root):
        via = "through a symlink " if _via_symlink(root / given, real) else ""
        raise OutsideWorkspaceError(
            f"{path}: refused, it leads {via}to {real}, outside the workspace {root}. "
            "File tools only act inside the workspace; use a path inside it."
        )
    return real


def is_inside(real: Path, root: Path) -> bool:
    return real == root or root in real.parents


def _via_symlink(lexical: Path, real: Path) -> bool:
    return os.path.normpath(lexical) != str(real)


class Entry(NamedTuple):
    path: Path
    kind: Literal["file", "directory", "outside"]  # outside: a symlink leading out


def walk(top: Path, root: Path, *, recursive: bool) -> Iterator[Entry]:
    """Entries under `top`, sorted by name, depth first, never reading outside `root`.

    Symlinked directories are listed but not entered (a cycle of links would never end).
    A symlink whose target is outside is reported as such, and its target never examined.
    """
    try:
        with os.scandir(top) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except (PermissionError, NotADirectoryError):
        return  # one unreadable directory should not sink the whole listing
    for entry in entries:
        path = Path(entry.path)
        if entry.is_symlink():
            target = Path(os.path.realpath(path))
            if not is_inside(target, root):
                yield Entry(path, "outside")
            else:
                yield Entry(path, "directory" if target.is_dir() else "file")
        elif entry.is_dir():
            yield Entry(path, "directory")
            if recursive and entry.name not in SKIPPED_DIRECTORIES:
                yield from walk(path, root, recursive=True)
        else:
            yield Entry(path, "file")
