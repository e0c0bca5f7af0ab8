"""How a writer opens its file: the state read from it, a torn tail cut, or a new header
written (docs/session-format.md §6.6). `SessionStore.open` and `.in_memory` share it."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from ._exceptions import InvalidTransactionError, NotASessionError
from ._files import DescriptorFile, ReadBytes, StoreFile, fsync_dir, open_regular
from ._framing import describe_validation_error, is_torn_header
from ._ids import new_id
from ._lock import claim_in_process, lock_exclusive, release_in_process
from ._models import Header
from ._reader import reduce_bytes
from ._state import SessionState

Durability = Literal["process", "power"]
Clock = Callable[[], int]


def epoch_ms() -> int:
    """The writer's default clock."""
    return time.time_ns() // 1_000_000


def check_durability(durability: str) -> None:
    if durability not in ("process", "power"):
        raise ValueError(f"durability must be 'process' or 'power', not {durability!r}")


@contextmanager
def claimed_file(path: Path, create: bool) -> Iterator[tuple[DescriptorFile, str, bool]]:
    """The file at `path` claimed in this process and locked for writing, its key in the
    in-process registry, and whether it was made now; an exception in the block lets go
    of them."""
    key = os.path.realpath(path)
    claim_in_process(key, path)
    try:
        existed = path.exists()
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        file = DescriptorFile(open_regular(path, flags), path)
        try:
            lock_exclusive(file.fd, path)
            yield file, key, not existed
        except BaseException:
            file.close()
            raise
    except BaseException:
        release_in_process(key)
        raise


def move_claimed(file: DescriptorFile, key: str, target: Path) -> str:
    """Rename the claimed `file` (its key `key`) to `target`, claimed in its place; the
    new key. On failure nothing moved and the old claim stands."""
    new_key = os.path.realpath(target)
    claim_in_process(new_key, target)
    try:
        file.path.rename(target)
    except BaseException:
        release_in_process(new_key)
        raise
    release_in_process(key)
    file.follow(target)
    return new_key


def remove_snapshot_cache(path: Path) -> None:
    """Remove the snapshot cache an earlier version wrote beside the session, and its
    drafts (docs/session-format.md §8): only a regular file that begins as one, never a
    symbolic link or a file of the user's. The writer holds the session's lock, so no
    draft is anyone's. Never raises."""
    cache = path.with_name(f"{path.name}.snapshot")
    draft = re.compile(rf"\.{re.escape(cache.name)}\.[0-9a-f]{{12}}\.tmp")
    stale = []
    with suppress(OSError):
        fd = os.open(cache, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if os.read(fd, len(SNAPSHOT_MAGIC)) == SNAPSHOT_MAGIC:
                stale.append(cache)
        finally:
            os.close(fd)
    with suppress(OSError):
        stale += [p for p in path.parent.iterdir() if draft.fullmatch(p.name)]
    for file_path in stale:
        with suppress(OSError):
            file_path.unlink()  # a draft that is a symbolic link goes, not what it names


SNAPSHOT_MAGIC = b"tiny-agent-nb snapshot "


@dataclass(frozen=True)
class HeaderInit:
    """What a new session file's header says; id and createdAt are filled in."""

    cwd: str
    provider: str
    model: str
    environment_identity: str


def open_state(
    file: StoreFile,
    path: Path,
    create: HeaderInit | None,
    durability: Durability,
    clock: Clock,
    *,
    on_disk: bool,
    sync_dir: bool,
) -> tuple[SessionState, bool]:
    """The state of the file the writer just opened and locked, and whether it was
    created."""
    data = file.read()
    try:
        state = reduce_bytes(path, data, file.read_again)
    except NotASessionError:
        if create is None or not is_torn_header(data):
            raise
        # Empty, or a header torn by a writer that died while creating: start over.
        state = _write_header(file, path, create, durability, clock)
        if sync_dir:
            fsync_dir(path.parent)
        return state, True
    if on_disk:
        remove_snapshot_cache(path)
    if state.torn_tail_bytes:
        # The previous writer died mid-append; its partial line was never
        # committed. Cut it so the next line starts on a clean boundary.
        file.truncate(len(data) - state.torn_tail_bytes)
        if durability == "power":
            file.sync()
    return state, False


def _write_header(
    file: StoreFile, path: Path, create: HeaderInit, durability: Durability, clock: Clock
) -> SessionState:
    # Built and encoded before the torn bytes are cut: a header that cannot be written
    # (a clock out of range, a cwd that is no text) leaves the file as it was.
    try:
        header = Header(
            kind="header",
            version=2,
            id=new_id(),
            createdAt=clock(),
            cwd=create.cwd,
            provider=create.provider,
            model=create.model,
            environmentIdentity=create.environment_identity,
        )
        line = header.model_dump_json().encode("utf-8") + b"\n"
    except ValidationError as exc:
        reason = f"the new header is invalid: {describe_validation_error(exc)}"
        raise InvalidTransactionError(reason) from None
    except ValueError as exc:  # PydanticSerializationError: a lone surrogate
        raise InvalidTransactionError(f"the new header cannot be written: {exc}") from None
    file.truncate(0)
    file.append(line)
    if durability == "power":
        file.sync()
    return SessionState(header, ReadBytes(str(path), file.read_again, line))
