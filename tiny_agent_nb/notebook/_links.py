"""Which session file belongs to this notebook, and the link that keeps it when the
notebook is renamed, moved or duplicated.

The file (README, "In a notebook"): explicit (`%agent session PATH` /
`TinyAgent.session_path`) → Jupyter's `JPY_SESSION_NAME` → VS Code's `__vsc_ipynb_file__`
→ `./agent-session.jsonl`; a notebook `analysis.ipynb` gets `analysis.agent.jsonl`.

The link from a notebook to its session (docs/spec.md §10): a display no frontend
renders (the session's id and file name), left in the outputs of `%load_ext` and `%%agent`
cells of a notebook found through `JPY_SESSION_NAME`, saved and copied with the notebook.

A renamed notebook's kernel goes on writing the file it opened, but a restart or a new
kernel looks for the file named after the notebook. When that file is missing, the newest
link leads to the session it had: the file is renamed after the notebook when no other
notebook owns it and no kernel writes it; otherwise the notebook is a copy and gets a fork.

The notebook is untrusted input: a link is only followed to a file of the session's name
form, beside the notebook or in the kernel's directory, holding the session it names.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..render import cell_text
from ..session import (
    SessionError,
    SessionLockedError,
    SessionStore,
    fork_session,
    read_header,
)

LINK_MIME = "application/vnd.tiny-agent-nb.session+json"
SUFFIX = ".agent.jsonl"
_NOTEBOOK_BYTES = 64 << 20  # a bigger notebook is not searched for a link
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
_ARCHIVE = re.compile(r".*\.agent\.\d+\.jsonl")


@dataclass(frozen=True)
class Link:
    session: str  # the session's id (its header's)
    file: str  # the session file's name
    at: int  # when the link was made (epoch ms): a notebook's newest link wins


def link_bundle(session_id: str, session_path: Path, at: int) -> dict[str, Any]:
    """The display data of a link (no frontend renders this type: nothing is shown)."""
    return {LINK_MIME: {"session": session_id, "file": session_path.name, "at": at}}


def links_here(location: SessionLocation) -> bool:
    """Whether a session at `location` is linked from its notebook's outputs: one named
    after a notebook Jupyter named (not VS Code's, which shows the type it cannot render)."""
    notebook = location.notebook
    return (
        location.source == "JPY_SESSION_NAME"
        and notebook is not None
        and location.path == session_file_for(notebook)
    )


def newest_link(notebook: Path) -> Link | None:
    """The newest well-formed link in the saved notebook's outputs."""
    try:
        with notebook.open("rb") as file:
            data = file.read(_NOTEBOOK_BYTES + 1)
    except OSError:
        return None
    if len(data) > _NOTEBOOK_BYTES or LINK_MIME.encode() not in data:
        return None  # (most notebooks: no parse)
    try:
        cells = json.loads(data).get("cells", [])
    except (ValueError, RecursionError, AttributeError):
        return None
    links = [link for cell in _list(cells) for link in _cell_links(cell)]
    return max(links, key=lambda link: link.at, default=None)


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _cell_links(cell: object) -> list[Link]:
    if not isinstance(cell, dict):
        return []
    found = []
    for output in _list(cell.get("outputs")):
        data = output.get("data") if isinstance(output, dict) else None
        raw = data.get(LINK_MIME) if isinstance(data, dict) else None
        if not isinstance(raw, dict):
            continue
        session, file, at = raw.get("session"), raw.get("file"), raw.get("at")
        if (
            isinstance(session, str)
            and _ID.fullmatch(session)
            and isinstance(file, str)
            and _session_name(file)
            and type(at) is int
        ):
            found.append(Link(session, file, at))
    return found


def _session_name(name: str) -> bool:
    """A file name of the session form, and nothing that leads elsewhere."""
    return (
        name.endswith(SUFFIX)
        and not name.startswith(".")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and len(name.encode("utf-8", "surrogatepass")) <= 255
    )


def follow_notebook(location: SessionLocation, cwd: Path) -> str | None:
    """Before `%load_ext` opens `location`: when its file is missing and the notebook
    links a session, rename that session's file after the notebook, or fork it into
    `location.path`. Returns the one line that says what was done (or where a session
    that belongs to no notebook is), None when there is nothing to say."""
    notebook = location.notebook
    if not links_here(location) or notebook is None or os.path.lexists(location.path):
        return None
    link = newest_link(notebook)
    source = _linked_file(link, [notebook.parent, cwd], location.path) if link else None
    if source is None:
        return _unclaimed_hint(location.path, cwd)
    owner = source.with_name(source.name.removesuffix(SUFFIX) + ".ipynb")
    if owner.exists() and not same_file(owner, notebook):
        return _fork(source, location.path, f"a copy of {cell_text(owner.name)}")
    try:
        claim = SessionStore.open(source)
    except SessionLockedError:
        return _fork(source, location.path, "a copy of a notebook whose kernel writes it")
    except (SessionError, OSError) as exc:
        return (
            f"tiny-agent-nb: this notebook's session {cell_text(source.name)} could not be "
            f"opened ({cell_text(str(exc))}); a new session starts beside the notebook."
        )
    try:
        other = _opened_by_another(claim, source, notebook)
        if other is not None:
            return _fork(source, location.path, f"linked to the session {other} opened")
        _rename(source, location.path)
    except OSError as exc:
        return (
            f"tiny-agent-nb: this notebook's session is {cell_text(source.name)}, which could "
            f"not be renamed after it ({cell_text(exc.strerror or str(exc))}): "
            f"`%agent session {_shown(source, cwd)}` continues it."
        )
    finally:
        claim.close()
    return (
        f"tiny-agent-nb: this notebook was renamed or moved: its session "
        f"{cell_text(source.name)} is now {cell_text(location.path.name)}."
    )


def _opened_by_another(claim: SessionStore, source: Path, notebook: Path) -> str | None:
    """The name of another notebook that opened `source` as its session (its kernelOpened
    records, docs/spec.md §9) and is still there: `%agent session` in that notebook made the file
    its own whatever its name, and a link to it must not take it away."""
    for kernel in claim.kernels():
        name = kernel.notebook
        if name is None or name == notebook.name or not name.endswith(".ipynb") or "/" in name:
            continue
        if any((folder / name).exists() for folder in {source.parent, notebook.parent}):
            return cell_text(name)
    return None


def _linked_file(link: Link, folders: list[Path], target: Path) -> Path | None:
    for folder in dict.fromkeys(folders):
        candidate = folder / link.file
        if candidate == target or candidate.is_symlink():
            continue
        try:
            if read_header(candidate).id == link.session:
                return candidate
        except (SessionError, OSError):
            continue
    return None


def _rename(source: Path, target: Path) -> None:
    """`source` under the name `target`, never over a file there."""
    try:
        os.link(source, target)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links
        if os.path.lexists(target):
            raise FileExistsError(17, "File exists", str(target)) from None
        source.rename(target)
    else:
        source.unlink()


def _fork(source: Path, target: Path, what: str) -> str:
    try:
        fork_session(source, target)
    except (SessionError, OSError) as exc:
        return (
            f"tiny-agent-nb: this notebook is {what}, whose session {cell_text(source.name)} "
            f"could not be copied ({cell_text(str(exc))}); a new session starts beside it."
        )
    return (
        f"tiny-agent-nb: this notebook is {what}: its conversation goes on in a fork, "
        f"{cell_text(target.name)}; {cell_text(source.name)} stays the other notebook's."
    )


def _shown(path: Path, cwd: Path) -> str:
    """How `%agent session` names `path` from the kernel's directory."""
    return cell_text(shlex.quote(path.name if path.parent == cwd else str(path)))


def _unclaimed_hint(target: Path, cwd: Path) -> str | None:
    """Sessions beside the new one that no notebook of their name owns (a notebook
    renamed before its link was saved): where its history may be."""
    try:
        names = sorted(
            p.name
            for p in target.parent.glob(f"*{SUFFIX}")
            if _session_name(p.name)
            and not _ARCHIVE.fullmatch(p.name)
            and not p.with_name(p.name.removesuffix(SUFFIX) + ".ipynb").exists()
        )
    except OSError:
        return None
    if not names:
        return None
    shown = ", ".join(cell_text(name) for name in names[:3])
    return (
        f"tiny-agent-nb: {shown} beside this notebook belong{'s' if len(names) == 1 else ''} "
        f"to no notebook: `%agent session {_shown(target.with_name(names[0]), cwd)}` "
        f"continues {'it' if len(names) == 1 else 'the first'}."
    )


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


# ---------------------------------------------------------------- the session file


def same_file(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


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


def kept_conversations(path: Path) -> list[str]:
    """The names of the conversations kept beside the session at `path` (`%agent new`'s
    and `%agent fork`'s, `session.next_archive_path`), oldest first."""
    stem = path.name.removesuffix(".jsonl")
    numbered = []
    try:
        for kept in path.parent.glob(f"{glob.escape(stem)}.*.jsonl"):
            number = kept.name[len(stem) + 1 : -len(".jsonl")]
            if number.isascii() and number.isdigit():
                numbered.append((int(number), kept.name))
    except OSError:
        return []
    return [name for _, name in sorted(numbered)]


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
