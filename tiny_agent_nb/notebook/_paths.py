"""Which session file belongs to this notebook (README, "In a notebook").

Resolution order: explicit (`%agent session PATH` / `TinyAgent.session_path`) →
Jupyter's `JPY_SESSION_NAME` → VS Code's `__vsc_ipynb_file__` → `./agent-session.jsonl`.
A notebook `analysis.ipynb` gets `analysis.agent.jsonl` beside it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FALLBACK = "agent-session.jsonl"


@dataclass(frozen=True)
class SessionLocation:
    path: Path
    source: str  # explicit | JPY_SESSION_NAME | __vsc_ipynb_file__ | default
    # The user wrote the path with a trailing slash, or ending in `.` or `..`: they named
    # a directory, which `Path` would silently turn into a file of that name.
    names_directory: bool = False
    # The notebook the session belongs to, when the path came from its name.
    notebook: Path | None = None


def session_file_for(notebook: Path) -> Path:
    return notebook.with_name(f"{notebook.stem}.agent.jsonl")


def _notebook_path(value: str, cwd: Path) -> Path | None:
    if not value.endswith(".ipynb"):
        return None  # a console or an opaque session id, not a notebook
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    # Some servers give the path relative to their root, not to the kernel; the kernel
    # runs in the notebook's directory, so the name is what locates it.
    return cwd / path.name


def resolve_session_path(
    *,
    explicit: str | None,
    environ: Mapping[str, str],
    user_ns: Mapping[str, Any],
    cwd: Path,
) -> SessionLocation:
    jpy = _notebook_path(environ.get("JPY_SESSION_NAME", ""), cwd)
    vsc_name = user_ns.get("__vsc_ipynb_file__")
    # VS Code's own, a plain str: a user's object that rebinds the name runs no code.
    vsc = _notebook_path(vsc_name, cwd) if type(vsc_name) is str else None
    if explicit:
        # The notebook too, though the path is not its name: the file records which
        # notebook opened it (its kernelOpened), which a link to it then respects.
        path = (cwd / Path(explicit).expanduser()).absolute()
        return SessionLocation(
            path, "explicit", names_directory=names_a_directory(explicit), notebook=jpy or vsc
        )
    if jpy is not None:
        return SessionLocation(session_file_for(jpy), "JPY_SESSION_NAME", notebook=jpy)
    if vsc is not None:
        return SessionLocation(session_file_for(vsc), "__vsc_ipynb_file__", notebook=vsc)
    return SessionLocation(cwd / FALLBACK, "default")


def names_a_directory(path: str) -> bool:
    """`dir/`, `dir/.` and `dir/..` name a directory whether or not one is there:
    `Path` drops a trailing slash and a last `.`, which would leave a file named `dir`."""
    return path.rsplit(os.sep, 1)[-1] in ("", os.curdir, os.pardir)


def next_archive_path(path: Path) -> Path:
    """`analysis.agent.jsonl` → the first free `analysis.agent.<n>.jsonl` (n from 1)."""
    stem = path.name.removesuffix(".jsonl")
    n = 1
    while (candidate := path.with_name(f"{stem}.{n}.jsonl")).exists():
        n += 1
    return candidate


def not_a_file(path: Path) -> str | None:
    """What `path` is when it exists but cannot hold a session (`a directory`, ...)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # missing (it will be created) or unreadable (opening says why)
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"
