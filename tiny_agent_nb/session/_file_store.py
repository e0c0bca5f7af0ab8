"""The file store: the bytes of workspace files before and after a tool changed them, so a
rewind can put them back (docs/spec.md, "File history").

Content-addressed: a blob's name is the SHA-256 hex of its bytes, its digest the format's
Digest (`sha256:<hex>`), so writing the same content twice keeps one copy, and `get`
verifies what it reads. One directory per session, under the user's state directory
($XDG_STATE_HOME, else ~/.local/state)/tiny-agent-nb/files/<session id>/, never beside
the notebook: the blobs may hold what the agent overwrote, and a notebook folder is shared
or committed. Directories 0700, blobs 0600; a blob is written to a temporary name, fsynced
and renamed, so it is whole or absent after a crash; nothing is opened through a symlink.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ._exceptions import FileStoreError
from ._files import fsync_dir, read_fd, write_all

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_NAMED = re.compile(rb"sha256:([0-9a-f]{64})")
# Age below which `collect` leaves a blob or temporary file alone: a put whose intent is not
# committed yet is younger (in another process writing a copy of the file, same id).
GRACE = 24 * 3600.0
_SESSION_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]*")
_TEMP = ".tmp-"  # a blob being written; a crash may leave one, never named by a digest


def state_root() -> Path:
    """Where every session's store lives: $XDG_STATE_HOME/tiny-agent-nb/files."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    # The XDG spec: a relative value is invalid and must be ignored.
    state = Path(base) if Path(base).is_absolute() else Path.home() / ".local" / "state"
    return state / "tiny-agent-nb" / "files"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class FileStore:
    """The blobs of one session. `max_file` and `max_session` bound what `fits` accepts;
    `put` itself stores whatever it is given."""

    # The caps' defaults (TinyAgent.file_history_max_file / _max_session): a source file
    # and a notebook fit many times over; a data set or a build output is not kept.
    MAX_FILE = 10 << 20  # bytes of one file's content (10 MiB)
    MAX_SESSION = 256 << 20  # bytes of all one session's blobs (256 MiB)
    digest = staticmethod(digest_of)  # what a blob of some bytes is named by

    def __init__(
        self,
        directory: Path,
        *,
        max_file: int = MAX_FILE,
        max_session: int = MAX_SESSION,
    ) -> None:
        self.directory = directory
        self.max_file = max_file
        self.max_session = max_session
        self._size: int | None = None  # bytes of blobs stored, counted on first need

    @classmethod
    def for_session(
        cls,
        session_id: str,
        root: Path | None = None,
        *,
        max_file: int = MAX_FILE,
        max_session: int = MAX_SESSION,
    ) -> FileStore:
        """The store of session `session_id` under `root` (default: `state_root()`).
        Nothing is created until the first `put`."""
        if not _SESSION_ID.fullmatch(session_id):
            raise FileStoreError(f"{session_id!r} is not a session id a store can be named by")
        directory = (root or state_root()) / session_id
        return cls(directory, max_file=max_file, max_session=max_session)

    def has(self, digest: str) -> bool:
        try:
            st = os.lstat(self.directory / _hex(digest))
        except FileNotFoundError:
            return False
        return stat.S_ISREG(st.st_mode)

    def get(self, digest: str) -> bytes:
        """The bytes whose digest is `digest`; FileStoreError if absent or damaged."""
        path = self.directory / _hex(digest)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise FileStoreError(f"{digest} is not in {self.directory}: {exc.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FileStoreError(f"{path} is not a regular file")
            data = read_fd(fd)
        finally:
            os.close(fd)
        if digest_of(data) != digest:
            raise FileStoreError(f"{path} is damaged: its bytes no longer have digest {digest}")
        return data

    def put(self, data: bytes) -> str:
        """Store `data` (durably: fsynced, and its name too) and return its digest."""
        digest = digest_of(data)
        name = _hex(digest)
        self._make_directory()
        target = self.directory / name
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(target)
            # A blob of the right size is taken as whole (written by rename); `get` checks it.
            if stat.S_ISREG(st.st_mode) and st.st_size == len(data):
                os.utime(target, follow_symlinks=False)  # put again: young for `collect`
                return digest
            self._size = None  # a damaged blob is replaced: count again
        temp = self.directory / f"{_TEMP}{secrets.token_hex(8)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600)
        try:
            write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            temp.unlink()
            raise
        os.close(fd)
        temp.replace(target)
        fsync_dir(self.directory)
        self._size = None if self._size is None else self._size + len(data)
        return digest

    def fits(self, *blobs: bytes) -> str | None:
        """None if `blobs` may be kept under the caps; else which cap they pass, in words."""
        for data in blobs:
            if len(data) > self.max_file:
                return f"the file is {len(data)} bytes, past the per-file cap of {self.max_file}"
        sizes = {digest_of(data): len(data) for data in blobs}
        new = sum(size for digest, size in sizes.items() if not self.has(digest))
        if self.size() + new > self.max_session:
            return f"the session's file history would pass its cap of {self.max_session} bytes"
        return None

    def size(self) -> int:
        """Bytes of the blobs stored."""
        if self._size is None:
            try:
                entries = list(os.scandir(self.directory))
            except FileNotFoundError:
                entries = []
            self._size = sum(
                e.stat(follow_symlinks=False).st_size
                for e in entries
                if _DIGEST.fullmatch("sha256:" + e.name) and e.is_file(follow_symlinks=False)
            )
        return self._size

    def collect(self, session: Callable[[], bytes], *, older_than: float = GRACE) -> int:
        """Remove what nothing names: blobs whose digest occurs nowhere in `session()` (the
        session file's bytes: every record that names a blob is in it), and temporary files
        a crashed put left, if older than `older_than` seconds. The file is read only when
        something is that old: an open reads it once already. How many were removed."""
        try:  # never through a symlink: its blob-named files are not this session's
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return 0
        cutoff = time.time() - older_than
        removed = 0
        try:
            old = []
            for entry in os.scandir(fd):
                blob = _DIGEST.fullmatch("sha256:" + entry.name) is not None
                if blob or entry.name.startswith(_TEMP):
                    with contextlib.suppress(FileNotFoundError):
                        if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                            old.append((entry.name, blob))
            named = {match.decode() for match in _NAMED.findall(session())} if old else set()
            for name, blob in old:
                if not (blob and name in named):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=fd)
                        removed += 1
        finally:
            os.close(fd)
        self._size = None
        return removed

    def adopt(self, source: FileStore, lines: Iterable[bytes]) -> int:
        """Make the blobs of `source` that `lines` (a session's bytes) name this store's
        too: hard links where the file system allows (a blob is never changed in place),
        else copies. How many it took."""
        named = {match.decode() for piece in lines for match in _NAMED.findall(piece)}
        taken = 0
        for hex_digest in sorted(named):
            digest = "sha256:" + hex_digest
            if not source.has(digest) or self.has(digest):
                continue
            self._make_directory()
            try:
                os.link(source.directory / hex_digest, self.directory / hex_digest)
            except OSError:  # another file system, or none with links: copy, checked
                self.put(source.get(digest))
            taken += 1
        self._size = None
        return taken

    def _make_directory(self) -> None:
        """The store's directory, and those above it that are missing, made 0700; the
        session's own directory must not be a symlink."""
        missing: list[Path] = []
        path = self.directory
        while not os.path.lexists(path):
            missing.append(path)
            path = path.parent
        for path in reversed(missing):
            with contextlib.suppress(FileExistsError):
                path.mkdir(0o700)
        st = os.lstat(self.directory)
        if not stat.S_ISDIR(st.st_mode):
            raise FileStoreError(f"{self.directory} is not a directory (a symlink?); not used")


def _hex(digest: str) -> str:
    match = _DIGEST.fullmatch(digest)
    if match is None:
        raise FileStoreError(f"{digest!r} is not a sha256 digest")
    return match.group(1)
