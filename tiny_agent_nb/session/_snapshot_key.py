"""The per-user key that makes a snapshot authentic (docs/spec.md §14).

A notebook folder can come from anywhere, with any file beside its session. A digest of
the session's bytes only says which bytes a snapshot claims to cover; whoever wrote the
snapshot could have computed it. A MAC under a key that never leaves this user's state
directory says that this user's own writer wrote it, so its content may be believed.

The key is 32 random bytes in `$XDG_STATE_HOME/tiny-agent-nb/snapshot.key` (default
`~/.local/state/tiny-agent-nb/`), mode 0600, created on first use by a writer. A key that
is missing, unreadable, not a regular file of ours, readable by others or of the wrong
size is no key: every snapshot is then ignored (a full read), never an error.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

KEY_BYTES = 32
KEY_NAME = "snapshot.key"


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or ""
    # The XDG spec: a relative path is invalid and must be ignored.
    root = Path(base) if Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "tiny-agent-nb"


def read_key() -> bytes | None:
    """The user's snapshot key, or None when there is no usable one (never raises)."""
    try:
        fd = os.open(state_dir() / KEY_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (OSError, RuntimeError):  # RuntimeError: no home directory to expand
        return None
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.getuid()
            or st.st_mode & 0o077
            or st.st_size != KEY_BYTES
        ):
            return None
        key = os.pread(fd, KEY_BYTES + 1, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return key if len(key) == KEY_BYTES else None


def key_for_writing() -> bytes | None:
    """The user's key, created (mode 0600) when there is none yet; None when it can be
    neither read nor made (a read-only home, a foreign file in its place)."""
    key = read_key()
    if key is not None:
        return key
    directory = state_dir()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Written under a private name, then linked into place: link() refuses an
        # existing name, so two writers racing to create it agree on the first one, and
        # a reader never sees a key half written.
        draft = directory / f".{KEY_NAME}.{os.getpid()}.{os.urandom(4).hex()}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, os.urandom(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(draft, directory / KEY_NAME)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    except (OSError, RuntimeError):
        return None
    return read_key()
