"""Opening a session file for a kernel: what may be refused, and how each refusal is
said in one line that names what was kept and what to do next.

The store refuses (locked, damaged, not a session, not a regular file); here each
refusal becomes a `NotebookError`, or a `SessionInUseError` when another process writes
the file (a kernel may still read it then).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from .._exceptions import TinyAgentError
from ..provider import Completion
from ..render import cell_text
from ..session import (
    Durability,
    HeaderInit,
    NotASessionError,
    SessionCorruptError,
    SessionLockedError,
    SessionState,
    SessionStore,
    load_session,
)
from ._paths import SessionLocation, not_a_file


class NotebookError(TinyAgentError):
    """Something the user must act on; the message says what and how."""


class SessionInUseError(NotebookError):
    """Another process writes the session: this kernel may still read it."""

    def __init__(self, message: str, holder_pid: int | None) -> None:
        super().__init__(message)
        self.holder_pid = holder_pid


def same_file(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


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


def read_only_label(exc: NotebookError) -> str | None:
    if not isinstance(exc, SessionInUseError):
        return None
    who = f"process {exc.holder_pid}" if exc.holder_pid else "another process"
    return f"read-only: {who} writes this session"


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
        return SessionStore.open(path, create=init, durability=durability)
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
