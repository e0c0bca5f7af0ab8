"""SessionStore: the one writer of a session file, and `load_session` for readers.

Durability (docs/spec.md §7.2): a commit is one `os.write` of the whole transaction line to an
O_APPEND descriptor, so once `commit` returns the line survives a crash of this process
(`kill -9`, OOM). `durability="power"` also fsyncs the file (and the directory when the
file is created) before a commit that precedes an effect returns: a stepAttempt, an intent,
an operation's start or end (`syncs_at_once`). A commit that only records what came of an
effect is synced by the next one that does, or by `close` (a group commit).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import ValidationError

from ._exceptions import (
    InvalidTransactionError,
    SessionClosedError,
    SessionError,
    SessionWriteError,
)
from ._facts import NewFact
from ._files import DescriptorFile, MemoryFile, StoreFile, open_regular
from ._framing import describe_validation_error, encode_transaction
from ._ids import is_uuid7, new_id
from ._lock import FifoLock, claim_in_process, lock_exclusive, release_in_process
from ._models import Fact, Header, RecordFact
from ._opening import Clock, Durability, HeaderInit, check_durability, epoch_ms, open_state
from ._reader import reduce_source, state_from_new_snapshot
from ._reducer import apply_fact
from ._signals import sigint_deferred
from ._snapshot import refresh_snapshot
from ._state import SessionState
from ._tables import Kernel, LearnedWindow, Operation, Tables, Violation

Subscriber = Callable[[Sequence[Fact]], None]

log = logging.getLogger("tiny_agent_nb.session")


class SessionStore:
    """Open with `SessionStore.open(...)`; `commit`, `load`, `subscribe`, `close`."""

    def __init__(
        self,
        *,
        path: Path,
        key: str | None,
        file: StoreFile,
        state: SessionState,
        size: int,
        durability: Durability,
        clock: Clock,
    ) -> None:
        self._path = path
        self._key = key  # in the in-process registry of writers (None: in memory)
        self._file: StoreFile | None = file
        self._state = state
        self._size = size
        self._durability = durability
        self._clock = clock
        self._fifo = FifoLock()
        self._subscribers: list[Subscriber] = []
        self._stale = False  # memory may lag the file after an interrupted commit
        self._unsynced = False  # power: bytes written since the last sync
        self._synced_size = size  # power: the file's size at the last sync that succeeded
        self._sync_failed = False  # power: a sync failed since then (see _sync)
        self.repaired_tail_bytes = state.torn_tail_bytes
        self.created = False
        self._snapshot_lines = 0  # transaction lines the snapshot on disk covers

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(
        cls,
        path: str | Path,
        create: HeaderInit | None = None,
        durability: Durability = "process",
        *,
        clock: Clock = epoch_ms,
    ) -> SessionStore:
        """Open `path` as its only writer, repairing a torn tail.

        With `create`, a missing file (or one holding only a torn header) becomes a new
        session; an existing session is opened as it is.
        """
        check_durability(durability)
        path = Path(path)
        key = os.path.realpath(path)
        claim_in_process(key, path)
        try:
            existed = path.exists()
            flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
            file = DescriptorFile(open_regular(path, flags))
            try:
                lock_exclusive(file.fd, path)
                sync_dir = not existed and durability == "power"
                return cls._open_file(
                    file, path, key, create, durability=durability, clock=clock, sync_dir=sync_dir
                )
            except BaseException:
                file.close()
                raise
        except BaseException:
            release_in_process(key)
            raise

    @classmethod
    def in_memory(
        cls,
        buffer: bytearray,
        create: HeaderInit | None = None,
        durability: Durability = "process",
        *,
        clock: Clock = epoch_ms,
        name: str = "<memory>",
    ) -> SessionStore:
        """The writer of a session file held in `buffer`, appended to and cut exactly as
        `open` does a file (the same repair, commit and resync code); no disk, no lock.
        For properties over many byte images (LevelDB's log tests, pi-mono's inMemory()).
        `name` stands for the path in errors and in the state."""
        check_durability(durability)
        file = MemoryFile(buffer)
        return cls._open_file(file, Path(name), None, create, durability=durability, clock=clock)

    @classmethod
    def _open_file(
        cls,
        file: StoreFile,
        path: Path,
        key: str | None,
        create: HeaderInit | None,
        *,
        durability: Durability,
        clock: Clock,
        sync_dir: bool = False,
    ) -> SessionStore:
        state, created = open_state(
            file, path, create, durability, clock, snapshot=key is not None, sync_dir=sync_dir
        )
        store = cls(
            path=path,
            key=key,
            file=file,
            state=state,
            size=file.size(),
            durability=durability,
            clock=clock,
        )
        store.created = created
        store._snapshot_lines = state._snapshot_lines
        store._snapshot_if_behind()
        if store._snapshot_lines != state._snapshot_lines:  # written now, of every line
            store._state = state_from_new_snapshot(path, state, file)
        return store

    # ------------------------------------------------------------------ properties
    @property
    def path(self) -> Path:
        return self._path

    @property
    def header(self) -> Header:
        return self._state.header

    @property
    def durability(self) -> Durability:
        return self._durability

    @property
    def closed(self) -> bool:
        return self._file is None

    # ------------------------------------------------------------------ commit
    def commit(self, facts: Sequence[NewFact]) -> list[Fact]:
        """Validate, append as one line, then apply. Returns the committed facts.

        Refused transactions raise InvalidTransactionError and leave the file and the
        state exactly as they were.
        """
        if self._fifo.owner == threading.get_ident():
            raise SessionError("commit() called from inside a commit (e.g. by a subscriber)")
        with sigint_deferred(), self._fifo:
            file = self._require_open()
            if self._stale:
                self._resync(file)
            if not facts:
                raise InvalidTransactionError("a transaction holds at least one fact")
            tables = self._state._tables  # the store's own state, never handed out
            savepoint = tables.begin()
            try:
                built = self._apply(tables, facts)
                line = encode_transaction(built)
                self._append(file, line, syncs_at_once(built))
            except (InvalidTransactionError, SessionWriteError):
                tables.rollback(savepoint)
                raise
            except BaseException:
                # SIGINT is held back (see _signals), but another signal handler may raise
                # anywhere here (a SIGTERM or SIGALRM handler), even after the write.
                # The file is the truth: cut any partial line and reduce it again.
                tables.rollback(savepoint)
                self._stale = True
                self._resync(file)
                raise
            tables.commit()
            tables.lines.append(line)
            self._size += len(line)
            self._notify(built)
            return built

    def _apply(self, tables: Tables, facts: Sequence[NewFact]) -> list[Fact]:
        at = self._clock()
        built: list[Fact] = []
        for index, new in enumerate(facts):
            fact_id = new.id if new.id is not None else new_id()
            try:
                # perf: register row "reserved-id-once" (docs/benchmarks.md).
                # The envelope model checks a reserved id's UUIDv7 pattern; nothing else
                # in it can be wrong (seq, at and the validated payload come from here).
                fact = new.build(seq=tables.last_seq + 1, fact_id=fact_id, at=at)
            except ValidationError as exc:
                reason = describe_validation_error(exc)
                if not is_uuid7(fact_id):
                    reason = f"id {fact_id!r} is not a UUIDv7"
                raise InvalidTransactionError(reason, index=index) from None
            try:
                apply_fact(tables, fact, index)
            except Violation as exc:
                raise InvalidTransactionError(str(exc), index=index) from None
            built.append(fact)
        return built

    def _resync(self, file: StoreFile) -> None:
        source, size = file.reader(str(self._path))
        known = self._state.last_seq
        state = reduce_source(self._path, source, size)
        if state.torn_tail_bytes:
            size -= state.torn_tail_bytes
            file.truncate(size)
            state._torn_tail_bytes = 0
        self._state = state
        self._size = size
        self._stale = False
        self._notify(self._state.facts[known:])

    def _append(self, file: StoreFile, line: bytes, sync: bool) -> None:
        try:
            if self._durability == "power":
                # Set before the write: a signal handler that raises after it leaves the
                # line in the file (see commit), still to be synced.
                self._unsynced = True
            file.append(line)
            # perf: register row "group-commit" (docs/benchmarks.md)
            if sync and self._durability == "power":
                # Of the file: the lines before this one are synced with it.
                self._sync(file, self._size + len(line))
        except OSError as exc:
            try:
                file.truncate(self._size)
            except OSError:
                # The file may now end in a partial line (a torn tail, which readers
                # ignore), but appending after it would glue two transactions together.
                # This is the writer's close: the sync it owes acknowledged lines first.
                self._sync_owed(file)
                self._close_file()
                log.exception("could not cut %s back after a failed write", self._path)
            raise SessionWriteError(str(self._path), exc) from exc

    def _sync(self, file: StoreFile, size: int) -> None:
        """fsync the file. A failed fsync may leave the pages it covered marked written
        (Linux reports a writeback error once), so a later one would neither write nor
        fail for them: until a sync succeeds, what lies past the last good one (lines
        acknowledged unsynced, §7.2) is written again, unchanged, before each sync."""
        try:
            if self._sync_failed:
                file.rewrite(self._synced_size)
            file.sync()
        except OSError:
            self._sync_failed = True
            raise
        self._sync_failed = self._unsynced = False
        self._synced_size = size

    def _sync_owed(self, file: StoreFile) -> None:
        """Power mode: sync the lines committed unsynced before a close that cannot raise."""
        if not self._unsynced:
            return
        try:
            self._sync(file, self._size)
        except OSError:
            log.exception("could not sync %s before closing it", self._path)

    # ------------------------------------------------------------------ reading
    def load(self) -> SessionState:
        """A snapshot of the session as committed so far (later commits don't change it)."""
        if self._fifo.owner == threading.get_ident():
            # Called by a subscriber during our own commit: the lock is ours already.
            self._require_open()
            return self._state.copy()
        with sigint_deferred(), self._fifo:
            file = self._require_open()
            if self._stale:
                self._resync(file)
            return self._state.copy()

    def open_operation(self) -> Operation | None:
        """The operation still open, if any (cheaper than `load()`: no snapshot)."""
        # perf: register row "open-operation" (docs/benchmarks.md)
        if self._fifo.owner == threading.get_ident():
            return self._state.open_operation
        with sigint_deferred(), self._fifo:
            self._require_open()
            return self._state.open_operation

    def system_prompt(self) -> str | None:
        """The latest recorded system prompt (`SessionState.system_prompt`), without a
        snapshot: one line is read back."""
        if self._fifo.owner == threading.get_ident():
            return self._state.system_prompt
        with sigint_deferred(), self._fifo:
            self._require_open()
            return self._state.system_prompt

    def learned_window(self, base_url: str, model: str) -> LearnedWindow | None:
        """The context window the session learned for `model` at `base_url` (docs/spec.md
        §17), if any: as cheap as `open_operation()`, no snapshot."""
        if self._fifo.owner == threading.get_ident():
            return self._state.context_windows.get((base_url, model))
        with sigint_deferred(), self._fifo:
            self._require_open()
            return self._state.context_windows.get((base_url, model))

    def kernels(self) -> list[Kernel]:
        """The kernelOpened records (docs/spec.md §18), without a snapshot of the rest."""
        if self._fifo.owner != threading.get_ident():
            with sigint_deferred(), self._fifo:
                return self.kernels()
        self._require_open()
        return list(self._state.kernels.values())

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(facts)` after each commit, in commit order. Returns unsubscribe."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def _notify(self, facts: list[Fact]) -> None:
        for callback in list(self._subscribers):
            try:
                callback(facts)
            except Exception:
                # The facts are already durable: a failing observer must not make the
                # caller believe the commit failed.
                log.exception("session subscriber %r failed", callback)

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Sync what power mode left pending (docs/spec.md §7.2), then close the file and
        release it. A sync that fails still closes the file, and raises SessionError."""
        with sigint_deferred(), self._fifo:
            if self._file is None:
                return
            try:
                if self._unsynced:
                    self._sync(self._file, self._size)
                if not self._stale:
                    self._snapshot_if_behind()
            except OSError as exc:
                raise SessionError(
                    f"could not sync {self._path} when closing it: {exc.strerror or exc}. "
                    "Every committed line was written and survives a crash of this process; "
                    "whether the last ones reached the disk is not known. The file is closed."
                ) from exc
            finally:
                self._close_file()

    def _snapshot_if_behind(self) -> None:
        if self._key is not None:  # a file, not memory
            sync = self._durability == "power"
            self._snapshot_lines = refresh_snapshot(
                self._path, self._state, self._snapshot_lines, sync=sync
            )

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()  # a descriptor's close also releases the flock
            self._file = None
            if self._key is not None:
                release_in_process(self._key)

    def _require_open(self) -> StoreFile:
        if self._file is None:
            raise SessionClosedError(self._path)
        return self._file

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"lastSeq={self._state.last_seq}"
        return f"<SessionStore {str(self._path)!r} {state} durability={self._durability}>"


def syncs_at_once(facts: Sequence[Fact]) -> bool:
    """Whether power mode syncs this transaction before `commit` returns (docs/spec.md
    §7.2): when it holds any record but `attemptFailed`, i.e. precedes an effect (a
    `stepAttempt`, an intent) or starts, aborts or ends an operation. Entries, usage and
    `attemptFailed` record what came of an effect: a power cut that loses them leaves the
    attempt or intent pending, settled as after a crash during the effect (§9.1). A
    `kernelOpened` precedes no effect: whatever its kernel does next starts with a
    transaction that syncs, and carries it to the disk (§18). A record type added later
    syncs unless it is named here."""
    for fact in facts:  # a loop, not any() over a generator: this runs on every commit
        if isinstance(fact, RecordFact) and fact.record.type not in _UNSYNCED_RECORDS:
            return True
    return False


_UNSYNCED_RECORDS = frozenset({"attemptFailed", "kernelOpened"})
