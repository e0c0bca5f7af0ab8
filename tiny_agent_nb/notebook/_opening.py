"""Opening a session file for a kernel: what may be refused, and how each refusal is
said in one line that names what was kept and what to do next.

The store refuses (locked, damaged, not a session, not a regular file); here each
refusal becomes a `NotebookError`, or a `SessionInUseError` when another process writes
the file (a kernel may still read it then). Also what an open writes first (this
kernel's `kernelOpened`, docs/spec.md §9) and `%agent new`'s keeping of the file under its
archive name.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import sys
import time
from functools import cache
from pathlib import Path

from .._exceptions import TinyAgentError
from ..agent import AgentError
from ..provider import Completion
from ..render import cell_text
from ..session import (
    Durability,
    FileStore,
    ForkRefusedError,
    HeaderInit,
    NotASessionError,
    SessionCorruptError,
    SessionError,
    SessionLockedError,
    SessionState,
    SessionStore,
    fork_session,
    load_session,
    next_archive_path,
    read_session_file,
)
from ..session import facts as f
from ._links import SessionLocation, not_a_file


class NotebookError(TinyAgentError):
    """Something the user must act on; the message says what and how."""


class SessionInUseError(NotebookError):
    """Another process writes the session: this kernel may still read it."""

    def __init__(self, message: str, holder_pid: int | None) -> None:
        super().__init__(message)
        who = f"process {holder_pid}" if holder_pid else "another process"
        self.read_only = f"read-only: {who} writes this session"


def refuse_non_file(location: SessionLocation) -> None:
    """Refuse a directory, FIFO, device or socket before opening it: reading a FIFO
    would block the kernel, writing a header to /dev/null would lose it. A path the user
    wrote with a trailing slash, or ending in `.` or `..`, names a directory even when none
    is there yet."""
    path = location.path
    if location.names_directory:
        raise NotebookError(
            f"tiny-agent-nb: {cell_text(str(path).rstrip(os.sep) + os.sep)} names a directory, "
            "not a session file; nothing was created. Choose a file with `%agent session PATH`."
        )
    kind = not_a_file(path)
    if kind is not None:
        raise NotebookError(
            f"tiny-agent-nb: {cell_text(str(path))} is {kind}, not a session file; it was left "
            "untouched. Choose a file with `%agent session PATH`."
        )


def store_error(path: Path, exc: Exception) -> NotebookError:
    """The store's refusal to open `path`, as one line that says what to do."""
    name = cell_text(path.name)
    if isinstance(exc, SessionLockedError):
        who = f"process {exc.holder_pid}" if exc.holder_pid else "another kernel"
        if exc.in_process:
            who = "this kernel already (another open session object)"
        message = (
            f"tiny-agent-nb: {name} is in use by {who}; this kernel will not write to it. "
            "Stop that kernel, or use `%agent session OTHER.jsonl`."
        )
        if exc.in_process:
            return NotebookError(message)
        return SessionInUseError(message, exc.holder_pid)
    if isinstance(exc, SessionCorruptError):
        damage = (
            f"tiny-agent-nb: line {exc.line} of {cell_text(exc.path)} is damaged: "
            f"{cell_text(exc.reason).rstrip('.')}. Nothing was changed."
        )
        if exc.line == 1:  # the header: nothing before it to keep
            return NotebookError(f"{damage} Start a fresh session with `%agent new`.")
        out = Path(exc.path).with_name(f"{Path(exc.path).stem}.salvaged.jsonl")
        return NotebookError(
            f"{damage} To go on with the lines before it, run `tiny-agent-nb salvage "
            f"{cell_text(shlex.quote(exc.path))} --out {cell_text(shlex.quote(str(out)))}` in "
            f"a terminal, then `%agent session {cell_text(shlex.quote(str(out)))}`; or start "
            "a fresh session with `%agent new`."
        )
    if isinstance(exc, NotASessionError):
        return NotebookError(
            f"tiny-agent-nb: {cell_text(exc.path)} is not a session file "
            f"({cell_text(exc.reason)}); it was left untouched. Choose another file with "
            "`%agent session PATH`."
        )
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return NotebookError(
        f"tiny-agent-nb: cannot open {cell_text(str(path))} ({cell_text(reason)}); it was "
        "left untouched. Choose another file with `%agent session PATH`."
    )


def read_unlocked(path: Path) -> SessionState:
    """The session another process writes, read without its lock (by a kernel that only
    reads it); a refusal said as `store_error` says it."""
    try:
        return load_session(path)
    except (SessionCorruptError, NotASessionError, OSError) as exc:
        raise store_error(path, exc) from None


INTERRUPTED_RECOVERY_NOTE = (
    "Loading was interrupted while it re-read what the previous kernel was reading: those "
    "reads and the run are marked interrupted (nothing was lost)."
)


class NoModel:
    """The provider of a loop that only recovers: recovery asks no model."""

    def complete(self, *args: object, **kwargs: object) -> Completion:
        raise AssertionError("recovery asks no model")


NO_MODEL = NoModel()


def open_store(location: SessionLocation, init: HeaderInit, durability: Durability) -> SessionStore:
    """Open (or create) the session file at `location` for this kernel to write; every
    refusal is a `NotebookError` that says what was kept and what to do next."""
    path = location.path
    refuse_non_file(location)
    if not path.parent.is_dir():
        # A typo in a path must not leave a tree of new directories behind.
        raise NotebookError(
            f"tiny-agent-nb: {cell_text(str(path.parent))} is not an existing directory, "
            "so no session was opened there and nothing was created. Create the "
            "directory first, or give a path in one that exists."
        )
    try:
        store = SessionStore.open(path, create=init, durability=durability)
    except (SessionLockedError, SessionCorruptError, NotASessionError, OSError) as exc:
        raise store_error(path, exc) from None
    except KeyboardInterrupt:
        # Ctrl-C while a long session is reduced (seconds): the store let go of the file
        # and its lock, and only ever cut a torn tail. Said in one line, and the file is
        # remembered to retry.
        raise NotebookError(
            f"tiny-agent-nb: opening {cell_text(path.name)} was interrupted; nothing in it "
            f"was lost. `%agent session {cell_text(shlex.quote(str(path)))}` opens it again."
        ) from None
    # The file history's blobs nothing in the file names (a crash between a put and its
    # intent): removed while this kernel holds the lock, before any run puts more. A
    # failure costs only disk space, never the session.
    with contextlib.suppress(OSError, SessionError):
        FileStore.for_session(store.header.id).collect(lambda: read_session_file(path))
    return store


def closed_note(name: str) -> str:
    """Why a store that closed itself (a write it could not cut back) is no longer open."""
    return (
        f"tiny-agent-nb: {name} was closed: a write to it failed and could not be cut "
        f"back. `%agent session {name}` opens it again (cutting the unfinished line)."
    )


def moved_note(path: Path, moved: str) -> str:
    """Why a store whose path names another file now is no longer written."""
    name, again = cell_text(path.name), cell_text(shlex.quote(str(path)))
    return (
        f"tiny-agent-nb: {name} changed on disk while this kernel had it open: "
        f"{cell_text(moved)} (git checkout, sync clients and editors do that). This "
        "kernel stopped writing to it; nothing was written there or anywhere else since. "
        f"`%agent session {again}` opens what is there now."
    )


# --------------------------------------------------------------- this kernel, recorded
# What a kernel id may look like in the file: Jupyter's are UUIDs, VS Code's similar.
_KERNEL_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_IMPORTED_AT = time.time_ns() // 1_000_000


def record_kernel(store: SessionStore, notebook: Path | None) -> None:
    """This kernel opened `store`'s session for writing; first, for what recovery settles
    next is this kernel's doing. A refused write is an AgentError that says what to do."""
    pid, host, started_at = process_identity()
    opened = f.KernelOpened(
        pid=pid,
        host=host,
        startedAt=started_at,
        kernelId=jupyter_kernel_id(),
        notebook=notebook.name if notebook is not None else None,
    )
    try:
        store.commit([f.NewFact(opened)])
    except SessionError as exc:
        name = cell_text(store.path.name)
        raise AgentError(
            f"opening {name} could not be recorded in it ({type(exc).__name__}: "
            f"{cell_text(str(exc))}). Nothing was changed: if the disk is full, free space "
            f"first, then `%agent session {cell_text(shlex.quote(str(store.path)))}` "
            "opens it again."
        ) from exc


@cache
def process_identity() -> tuple[int, str, int]:
    """(pid, host, epoch ms the process started), read once: two records by the same
    process must say the same, since that is how a later run tells "the same kernel
    reopened the session" (its variables are all there) from "another kernel"."""
    return os.getpid(), socket.gethostname(), _process_start() or _IMPORTED_AT


def _process_start() -> int | None:
    """When this process started, from Linux's /proc (boot time + the process's start
    in clock ticks); None elsewhere, where the time this module was imported stands in."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="ascii")
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text(encoding="ascii").splitlines()
            if line.startswith("btime ")
        )
        hertz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot * 1000 + ticks * 1000 // hertz


def jupyter_kernel_id() -> str | None:
    """The kernel id in the name of this kernel's connection file (`kernel-<id>.json`),
    as Jupyter servers and VS Code name it; None outside a kernel."""
    if "ipykernel" not in sys.modules:  # a terminal IPython: importing it would cost ~0.3 s
        return None
    try:
        from ipykernel.connect import get_connection_file  # noqa: PLC0415

        name = Path(get_connection_file()).name
    except Exception:  # not running in a kernel
        return None
    if not (name.startswith("kernel-") and name.endswith(".json")):
        return None
    stem = name.removeprefix("kernel-").removesuffix(".json")
    return stem if _KERNEL_ID.fullmatch(stem) else None


# --------------------------------------------------------------- `%agent new`
# The file is renamed only while this kernel holds its lock: a kernel refused the file must
# not move it from under its writer. From the rename until the new file is open an
# interrupt waits (`NotebookRuntime.new`): stopped between, this kernel would write the kept
# file, or hold no session where the notebook's is.
INTERRUPTED_NEW_NOTE = (
    "The interrupt came while the conversation was being switched: the switch was finished "
    "first, so the kept conversation and the new one are both whole."
)


def claim_for_archive(location: SessionLocation) -> SessionStore | None:
    """Take the writer's lock on the file before `%agent new` moves it (None: there is
    no file, or a damaged session, which is moved without it: no writer can hold a file
    the store refuses to read). A file that is no session at all (the user's notes, a
    notebook) is not ours to move: the open that refused it said it was left untouched."""
    path = location.path
    if not (path.exists() or path.is_symlink()):
        return None
    refuse_non_file(location)
    try:
        return SessionStore.open(path)
    except SessionCorruptError:
        return None
    except (SessionLockedError, NotASessionError, OSError) as exc:
        raise store_error(path, exc) from None
    except KeyboardInterrupt:  # a read as long as a first open's (see NotebookRuntime.open)
        raise NotebookError(
            f"tiny-agent-nb: reading {cell_text(path.name)} before keeping it was "
            "interrupted; nothing was moved. `%agent new` tries again."
        ) from None


def keep_as_archive(held: SessionStore | None, path: Path, *, current: SessionStore | None) -> Path:
    """Rename the file at `path` (`held`, its lock held) to its archive name, and close
    `held` unless it is the kernel's `current` store (closed with its session)."""
    archived = next_archive_path(path)
    try:
        if held is not None:
            held.move(archived)
        elif path.exists() or path.is_symlink():
            path.rename(archived)  # a damaged session: no writer can hold it
    except (OSError, SessionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise NotebookError(
            f"tiny-agent-nb: could not keep {cell_text(path.name)} as "
            f"{cell_text(archived.name)} ({cell_text(reason)}); nothing was changed."
        ) from None
    finally:
        if held is not None and held is not current:
            held.close()
    return archived


# --------------------------------------------------------------- `%agent fork`
def fork_here(store: SessionStore, path: Path, through: int | None) -> tuple[Path, str]:
    """`%agent fork`: the conversation of `store` through run `through` (None: all of it)
    forked under the name `path`; the file it was in kept, byte for byte, under its archive
    name, `store` still writing it there. The kept file's path and the fork's session id
    (docs/spec.md §10). The file is moved only once the fork is whole, just before the fork
    takes its name; should that fail, the file gets its name back."""
    kept: list[Path] = []

    def move_away() -> None:
        kept.append(keep_as_archive(store, path, current=store))

    try:
        header = fork_session(
            store.path, path, through=through, refuse_open=True, before_publish=move_away
        )
    except ForkRefusedError as exc:
        raise NotebookError(f"tiny-agent-nb: {cell_text(str(exc))}") from None
    except (SessionError, OSError) as exc:
        where = ""
        if kept:
            try:
                if os.path.lexists(path):  # a file that appeared there meanwhile is not ours
                    raise FileExistsError(17, "File exists", str(path))
                store.move(path)
            except (SessionError, OSError):
                where = f" The conversation is kept as {cell_text(kept[0].name)}."
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise NotebookError(
            f"tiny-agent-nb: no fork was made ({cell_text(reason)}); this kernel still writes "
            f"the conversation it had.{where}"
        ) from None
    return kept[0], header.id
