"""SessionStore: the one writer of a session file, and `load_session` for readers.

Durability (docs/session-format.md §6.2): a commit is one `os.write` of the whole transaction
line to an O_APPEND descriptor, so once `commit` returns the line survives a crash of this process
(`kill -9`, OOM). `durability="power"` also fsyncs the file (and the directory when the
file is created) before a commit that precedes an effect returns: a stepAttempt, an intent,
an operation's start or end (`syncs_at_once`). A commit that only records what came of an
effect is synced by the next one that does, or by `close` (a group commit).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ._exceptions import (
    InvalidTransactionError,
    SessionClosedError,
    SessionError,
    SessionReplacedError,
    SessionWriteError,
)
from ._facts import NewFact
from ._files import DescriptorFile, MemoryFile, StoreFile
from ._lock import FifoLock, release_in_process, sigint_deferred
from ._models import Fact, Header, RecordFact
from ._opening import (
    Clock,
    Durability,
    HeaderInit,
    check_durability,
    claimed_file,
    epoch_ms,
    move_claimed,
    open_state,
)
from ._reader import reduce_bytes
from ._state import SessionState
from ._tables import Kernel, LearnedWindow, Operation, Spend

T = TypeVar("T")

log = logging.getLogger("tiny_agent_nb.session")


def syncs_at_once(facts: Sequence[Fact]) -> bool:
    """Whether power mode syncs this transaction before `commit` returns (docs/session-format.md
    §6.2): when it holds a record that precedes an effect or starts, aborts or ends an
    operation. Entries, usage and `attemptFailed` record what came of an effect (losing
    them leaves it pending, as a crash during it would); a `kernelOpened` precedes none
    (docs/spec.md §9). A record type added later syncs unless it is named here."""
    for fact in facts:  # a loop, not any() over a generator: this runs on every commit
        if isinstance(fact, RecordFact) and fact.record.type not in _UNSYNCED_RECORDS:
            return True
    return False


_UNSYNCED_RECORDS = frozenset({"attemptFailed", "kernelOpened"})
Subscriber = Callable[[Sequence[Fact]], None]


class SessionStore:
    """Open with `SessionStore.open(...)`; `commit`, `load`, `subscribe`, `close`."""

    def __init__(
        self,
        file: StoreFile,
        path: Path,
        key: str | None,
        create: HeaderInit | None,
        *,
        durability: Durability,
        clock: Clock,
        sync_dir: bool = False,
    ) -> None:
        """Made by `open` and `in_memory`, on the file they opened (and claimed, `key`)."""
        state, self.created = open_state(
            file, path, create, durability, clock, on_disk=key is not None, sync_dir=sync_dir
        )
        self._path = path
        self._key = key  # in the in-process registry of writers (None: in memory)
        self._file: StoreFile | None = file
        self._state = state
        self._size = self._synced_size = file.size()  # power: its size at the last sync
        self._durability = durability
        self._clock = clock
        self._fifo = FifoLock()
        self._subscribers: list[Subscriber] = []
        self._stale = False  # memory may lag the file after an interrupted commit
        self._unsynced = False  # power: bytes written since the last sync
        self._sync_failed = False  # power: a sync failed since then (see _sync)
        self.repaired_tail_bytes = state.torn_tail_bytes

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
        """Open `path` as its only writer, repairing a torn tail. With `create`, a missing
        file (or one holding only a torn header) becomes a new session."""
        check_durability(durability)
        path = Path(path)
        with claimed_file(path, create is not None) as (file, key, made):
            sync_dir = made and durability == "power"
            return cls(
                file, path, key, create, durability=durability, clock=clock, sync_dir=sync_dir
            )

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
        """The writer of a session file held in `buffer`, with the code `open` runs but no
        disk and no lock (for properties over many byte images); `name` stands for the
        path in errors and in the state."""
        check_durability(durability)
        file = MemoryFile(buffer)
        return cls(file, Path(name), None, create, durability=durability, clock=clock)

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
        """Validate, append as one line, then apply; the committed facts. A refused
        transaction raises InvalidTransactionError and changes nothing."""
        if self._fifo.owner == threading.get_ident():
            raise SessionError("commit() called from inside a commit (e.g. by a subscriber)")
        with sigint_deferred(), self._fifo:
            file = self._require_open()
            if self._stale:
                self._resync(file)
            if not facts:
                raise InvalidTransactionError("a transaction holds at least one fact")

            def write(built: list[Fact], line: bytes) -> None:
                self._append(file, line, syncs_at_once(built))
                self._size += len(line)

            # The store's own state, never handed out: its tables are rolled back when
            # anything here raises.
            try:
                built = self._state.append_transaction(facts, self._clock(), write)
            except (InvalidTransactionError, SessionWriteError, SessionReplacedError):
                raise
            except BaseException:
                # SIGINT is held back (see _signals), but another signal handler may raise
                # anywhere here (a SIGTERM or SIGALRM handler), even after the write.
                # The file is the truth: cut any partial line and reduce it again.
                self._stale = True
                self._resync(file)
                raise
            self._notify(built)
            return built

    def _resync(self, file: StoreFile) -> None:
        data = file.read()
        known = self._state.last_seq
        state = reduce_bytes(self._path, data, file.read_again)
        size = len(data)
        if state.torn_tail_bytes:
            size -= state.torn_tail_bytes
            file.truncate(size)
            state = state.with_torn_tail(0)
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
            # After the write, not before: a file renamed over between a check and the
            # write would take the line (an intent) where nobody reads it, and its effect
            # would run. Checked here, the line is in the file the path names
            # (docs/session-format.md §6.4), or the commit is refused.
            moved = file.moved()
            # perf: register row "group-commit" (docs/benchmarks.md)
            if moved is None and sync and self._durability == "power":
                # Of the file: the lines before this one are synced with it.
                self._sync(file, self._size + len(line))
        except OSError as exc:
            self._cut_back(file)
            raise SessionWriteError(str(self._path), exc) from exc
        if moved is not None:
            self._cut_back(file)  # the file nobody reads any more gets nothing either
            raise SessionReplacedError(self._path, moved)

    def _cut_back(self, file: StoreFile) -> None:
        """Cut the file to its size before the commit that is being refused."""
        try:
            file.truncate(self._size)
        except OSError:
            # The file may now end in a partial line (a torn tail, which readers
            # ignore), but appending after it would glue two transactions together.
            # This is the writer's close: the sync it owes acknowledged lines first.
            self._sync_owed(file)
            self._close_file()
            log.exception("could not cut %s back after a failed write", self._path)

    def _sync(self, file: StoreFile, size: int) -> None:
        """fsync the file. A failed fsync may leave the pages it covered marked written
        (Linux reports a writeback error once), so a later one would neither write nor
        fail for them: until a sync succeeds, what lies past the last good one (lines
        acknowledged unsynced, docs/session-format.md §6.2) is written again, unchanged, before
        each sync."""
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
    def _reading(self, view: Callable[[SessionState], T]) -> T:
        """`view` of the writer's own state, under the commit lock (which a subscriber
        called during our own commit holds already)."""
        if self._fifo.owner == threading.get_ident():
            self._require_open()
            return view(self._state)
        with sigint_deferred(), self._fifo:
            file = self._require_open()
            if self._stale:
                self._resync(file)
            return view(self._state)

    def load(self) -> SessionState:
        """A copy of the session's state as committed so far (later commits don't change
        it)."""
        return self._reading(SessionState.copy)

    def open_operation(self) -> Operation | None:
        """The operation still open, if any (cheaper than `load()`: no copy)."""
        # perf: register row "open-operation" (docs/benchmarks.md)
        return self._reading(lambda state: state.open_operation)

    def spend(self, operation_id: str) -> Spend:
        """`SessionState.spend`, without a copy."""
        return self._reading(lambda state: state.spend(operation_id))

    def last_input_tokens(self) -> int | None:
        """`SessionState.last_input_tokens`, without a copy."""
        return self._reading(SessionState.last_input_tokens)

    def system_prompt(self) -> str | None:
        """The latest recorded system prompt, without a copy."""
        return self._reading(lambda state: state.system_prompt)

    def learned_window(self, base_url: str, model: str) -> LearnedWindow | None:
        """The context window learned for `model` at `base_url` (docs/spec.md §8), if any,
        without a copy."""
        return self._reading(lambda state: state.context_windows.get((base_url, model)))

    def operations(self) -> list[Operation]:
        """The operations in file order, without a copy of the rest."""
        return self._reading(lambda state: list(state.operations.values()))

    def operation_path(self) -> list[Operation]:
        """The operations on the conversation's path (docs/spec.md §17), in file order."""
        return self._reading(lambda state: state.operation_path())

    def kernels(self) -> list[Kernel]:
        """The kernelOpened records (docs/spec.md §9), without a copy of the rest."""
        return self._reading(lambda state: list(state.kernels.values()))

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(facts)` after each commit, in commit order. Returns unsubscribe."""
        self._subscribers.append(callback)

        def remove() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return remove

    def _notify(self, facts: list[Fact]) -> None:
        for callback in list(self._subscribers):
            try:
                callback(facts)
            except Exception:
                # The facts are already durable: a failing observer must not make the
                # caller believe the commit failed.
                log.exception("session subscriber %r failed", callback)

    def moved(self) -> str | None:
        """None while the store's path names the file it writes; else what happened to
        that file, in words (docs/session-format.md §6.4): every commit is then refused."""
        # No lock: a subscriber asks during a commit (a display refreshing), and a stat
        # of the path is as true a moment later as now.
        file = self._file
        return file.moved() if file is not None else None

    def move(self, target: str | Path) -> None:
        """Rename the file to `target` and go on writing it there, its lock held
        throughout (`%agent new` keeps a conversation under another name). OSError when
        the rename fails (nothing moved)."""
        target = Path(target)
        with sigint_deferred(), self._fifo:
            file = self._require_open()
            if not isinstance(file, DescriptorFile) or self._key is None:
                raise SessionError("a session held in memory has no file to move")
            moved = file.moved()
            if moved is not None:
                raise SessionReplacedError(self._path, moved)
            self._key = move_claimed(file, self._key, target)
            self._path = target

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Sync what power mode left pending (docs/session-format.md §6.2), then close the file and
        release it. A sync that fails still closes the file, and raises SessionError."""
        with sigint_deferred(), self._fifo:
            if self._file is None:
                return
            try:
                if self._unsynced:
                    self._sync(self._file, self._size)
            except OSError as exc:
                raise SessionError(
                    f"could not sync {self._path} when closing it: {exc.strerror or exc}. "
                    "Every committed line was written and survives a crash of this process; "
                    "whether the last ones reached the disk is not known. The file is closed."
                ) from exc
            finally:
                self._close_file()

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
