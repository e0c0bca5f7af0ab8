"""`%agent new`'s file work: the current session file kept under its archive name
(`<stem>.agent.<n>.jsonl`) before a fresh one is opened where it was.

The file is renamed only while this kernel holds its lock: a kernel that was refused the
file must not move it from under the kernel writing to it. From the rename until the new
file is open an interrupt waits, and is only noted (`NotebookRuntime.new`): stopped
between, this kernel would write the kept file, or hold no session (or leave an empty
file no open accepts) where the notebook's is.
"""

from __future__ import annotations

from pathlib import Path

from ..render import cell_text
from ..session import (
    NotASessionError,
    SessionCorruptError,
    SessionError,
    SessionLockedError,
    SessionStore,
)
from ._opening import NotebookError, refuse_non_file, store_error
from ._paths import SessionLocation, next_archive_path

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
