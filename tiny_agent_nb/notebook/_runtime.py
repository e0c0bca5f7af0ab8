"""One kernel's runtime: its session file, store, provider and loops. The engine the
magics drive; it knows nothing of IPython. Every failure a user meets is one
`NotebookError`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..agent import (
    AgentError,
    AgentLoop,
    LoopObserver,
    RecoveryReport,
    Replayed,
    RunResult,
    resumable_run,
)
from ..render import cell_text
from ..session import (
    Durability,
    HeaderInit,
    Operation,
    SessionError,
    SessionState,
    SessionStore,
    ToolIntent,
)
from ..tools import Notebook
from ._comm_pump import interrupt_held
from ._config import TinyAgent
from ._followers import SessionFollowers, Watcher
from ._links import SessionLocation, same_file
from ._loops import AskFn, KernelServers, LoopBuilder
from ._opening import (
    INTERRUPTED_NEW_NOTE,
    INTERRUPTED_RECOVERY_NOTE,
    NO_MODEL,
    NotebookError,
    SessionInUseError,
    claim_for_archive,
    closed_note,
    fork_here,
    keep_as_archive,
    moved_note,
    open_store,
    read_unlocked,
    record_kernel,
)
from ._provider import KernelProvider, SessionModel
from ._report import OpenReport, refusal_line
from ._user_cells import UserCells

_R = TypeVar("_R")


class NotebookRuntime:
    def __init__(
        self,
        config: TinyAgent,
        namespace: dict[str, object],
        *,
        hidden_variables: Mapping[str, object] | None = None,
        propose_cell: Callable[[str], str] | None = None,
        notebook: Notebook | None = None,
    ) -> None:
        """`hidden_variables`: what IPython keeps in `namespace` for itself;
        `propose_cell`: how a proposed cell reaches the notebook (None: there is none);
        `notebook`: the notebook the cell tools read and change (None: there is none)."""
        self.config = config
        self.user_cells = UserCells()  # the cells run since the previous prompt
        self.store: SessionStore | None = None
        self.location: SessionLocation | None = None
        self.open_error: str | None = None
        # Set while another process writes the chosen file: this kernel only reads it.
        self.read_only: str | None = None
        # "Allow bash for the rest of this session": this kernel's, for the file it has
        # open; another file or kernel asks again (docs/spec.md §13). Emptied, never replaced.
        self.allowed_tools: set[str] = set()
        # What `%agent fork` forked, by the fork's session id: `%agent status` says it.
        self.forked_from: dict[str, str] = {}
        self._followers = SessionFollowers()
        self.provider = KernelProvider(config)
        self.mcp = KernelServers(config)  # started by the first run that needs them
        self.session_model = SessionModel(config, self.provider)
        self._followers.watch(self.session_model.observe)
        self.loops = LoopBuilder(
            config,
            namespace,
            hidden_variables if hidden_variables is not None else {},
            propose_cell,
            notebook=notebook,
            provider=self.provider,
            mcp=self.mcp,
            session_model=self.session_model,
        )
        # `AgentLoop`'s question when a KeyboardInterrupt stops a run: what sent it, if
        # not the user (the glue knows the Stop button and a kernel restart).
        self.stopped_by: Callable[[], str | None] | None = None
        # What a timeline's "Rewind to before this run" button calls with the run's
        # number, on the main thread (None: `%agent rewind K`); an embedder may set it.
        self.on_rewind: Callable[[int], None] | None = None

    # ------------------------------------------------------------------ session file
    def open(self, location: SessionLocation) -> OpenReport:
        """Switch to `location`. The new file is opened (and locked) before the current
        session is closed: if it is refused, this kernel keeps the session it had."""
        self._drop_closed_store()
        current = self.store
        if current is not None and same_file(current.path, location.path):
            # Already ours: reopening would close it first, for nothing.
            self.location = location
            return self._report(location, current, None, just_opened=False)
        try:
            store = self._open_store(location)
        except NotebookError as exc:
            if current is not None:
                kept = cell_text(current.path.name)
                raise NotebookError(f"{exc} This kernel still writes to {kept}.") from None
            # Nothing to fall back on: remember where (so `%agent new` can start afresh
            # there) and why (repeated by the next cell instead of a vaguer error).
            self.location = location
            self.open_error = str(exc)
            self.read_only = exc.read_only if isinstance(exc, SessionInUseError) else None
            raise
        notes = self._close_noting()  # closed even when its last sync fails: go on
        self.allowed_tools.clear()  # allowed for that session, not for this one
        self.store, self.location, self.open_error = store, location, None
        self.read_only = None
        self._followers.follow(store)
        try:
            record_kernel(store, location.notebook)
            recovery = self._recover()
        except AgentError as exc:  # the file refused the write (disk full): nothing changed
            closing = self._close_noting()
            self.open_error = " ".join([f"tiny-agent-nb: {exc}", *closing])
            raise NotebookError(self.open_error) from None
        except KeyboardInterrupt:
            if store.open_operation() is not None:
                raise  # before recovery settled anything: the next load does it all
            recovery = None  # recover() settled the run before letting it through
            notes.append(INTERRUPTED_RECOVERY_NOTE)
        return self._report(location, store, recovery, just_opened=True, notes=notes)

    def _report(
        self,
        location: SessionLocation,
        store: SessionStore,
        recovery: RecoveryReport | None,
        *,
        just_opened: bool,
        notes: Sequence[str] = (),
    ) -> OpenReport:
        state = store.load()
        self.session_model.reset(state)  # before the note, which says the model it used
        waiting = self.session_model.waiting_note()
        return OpenReport(
            location=location,
            created=store.created and just_opened,
            repaired_tail_bytes=store.repaired_tail_bytes if just_opened else 0,
            state=state,
            recovery=recovery,
            notes=[*notes, *([waiting] if waiting is not None else [])],
        )

    def _open_store(self, location: SessionLocation) -> SessionStore:
        asked = self.session_model.asked()  # what a run asks, as the header says it
        init = HeaderInit(
            cwd=str(Path.cwd()),
            provider=asked.provider,
            model=asked.model,
            environment_identity=str(self.loops.workspace()),
        )
        durability: Durability = "power" if self.config.durability == "power" else "process"
        return open_store(location, init, durability)

    def _recover(self) -> RecoveryReport | None:
        """Settle what a dead kernel left open. It asks no model, so it runs even when
        no provider can be built (a malformed API key is reported by the first run).
        It starts no MCP server: an MCP intent is never re-run, only marked interrupted."""
        return self._loop(provider=NO_MODEL, with_mcp=False).recover()

    def close(self) -> None:
        self._followers.unfollow()
        self.mcp.close()
        self.provider.close()
        store, self.store = self.store, None
        if store is None:
            return
        try:
            store.close()
        except SessionError as exc:
            # Power mode's last sync failed (docs/session-format.md §6.2): the file is closed and
            # released anyway, so this kernel holds no session from here on.
            raise NotebookError(f"tiny-agent-nb: {cell_text(str(exc))}") from None
        finally:
            self._followers.tell(())

    def shutdown(self) -> None:
        """The kernel is exiting: close without drawing the displays once more. Nobody
        would read a "closed" note in a notebook being closed, and the update would only
        make the notebook unsaved ("Save your work?") as it closes."""
        self._followers.forget_watchers()
        self.close()

    def _close_noting(self) -> list[str]:
        """`close()`, its failure kept as a note for the report of what opens next."""
        try:
            self.close()
        except NotebookError as exc:
            return [str(exc).removeprefix("tiny-agent-nb: ")]
        return []

    # ------------------------------------------------------------------ displays
    def watch(self, watcher: Watcher) -> Callable[[], None]:  # displays: TimelineView
        return self._followers.watch(watcher)

    def read_state(self) -> tuple[SessionState, str | None]:
        """The current session as of now, and a label when this kernel only reads it
        (another process writes it: reading needs no lock)."""
        self._drop_closed_store()
        if self.store is not None:
            return self.store.load(), None
        if self.read_only is not None and self.location is not None:
            return read_unlocked(self.location.path), self.read_only
        return self.require_store().load(), None

    def new(self) -> tuple[Path, OpenReport]:
        """`%agent new`: keep the current file under its archive name and open a fresh one
        where it was."""
        self._drop_closed_store()  # a file replaced on disk is not this kernel's to move
        location = self._require_location()
        held = self.store or claim_for_archive(location)  # a long read: interruptible
        return self._switch(lambda: keep_as_archive(held, location.path, current=self.store))

    def fork(self, through: int | None) -> tuple[Path, OpenReport]:
        """`%agent fork`: `fork_here`, then the fork opened where the session was."""
        store = self.require_store()
        path = self._require_location().path
        (kept, fork_id), report = self._switch(lambda: fork_here(store, path, through))
        run = f"run {through}" if through is not None else "its last run"
        self.forked_from[fork_id] = f"{kept.name}, through {run}"
        return kept, report

    def _switch(self, move_aside: Callable[[], _R]) -> tuple[_R, OpenReport]:
        """`move_aside()` (what keeps the current file under another name), then the
        session's location opened; an interrupt waits until the switch is whole
        (`_opening`: why)."""
        location = self._require_location()
        with interrupt_held() as interrupts:
            try:
                kept = move_aside()
                notes = self._close_noting()
                report = self.open(location)
            finally:
                interrupted = bool(interrupts)
                interrupts.clear()  # the switch is whole: nothing is left to stop
        report.notes[:0] = [*notes, *([INTERRUPTED_NEW_NOTE] if interrupted else [])]
        return kept, report

    def _drop_closed_store(self) -> None:
        """Forget a store that closed itself (a write it could not cut back,
        docs/session-format.md §6.3) or whose path names another file now (§6.4), so the
        next cell says why and `%agent session` opens the file again."""
        store = self.store
        if store is None:
            return
        moved = None if store.closed else store.moved()
        if store.closed or moved is not None:
            self._close_noting()
            name = cell_text(store.path.name)
            self.open_error = closed_note(name) if moved is None else moved_note(store.path, moved)

    def require_store(self) -> SessionStore:
        self._drop_closed_store()
        if self.store is None:
            # Repeat why the last open failed (e.g. the file is in use by another kernel).
            raise NotebookError(
                self.open_error or "tiny-agent-nb: no session is open. Use `%agent session PATH`."
            )
        return self.store

    def session_path(self) -> Path:
        return self.store.path if self.store is not None else self._require_location().path

    def _require_location(self) -> SessionLocation:
        if self.location is None:
            raise NotebookError("tiny-agent-nb: no session file chosen. Use `%agent session PATH`.")
        return self.location

    # ------------------------------------------------------------------ runs
    def run(
        self,
        prompt: str,
        *,
        observer: LoopObserver,
        ask: AskFn | None,
        demo: bool = False,
        cell_id: str | None = None,
        **options: Any,
    ) -> RunResult:
        """`%%agent`: run `prompt` with a cell's options (model, max_steps, budget, tools,
        approve: `LoopBuilder.build`'s; None is the configured value) in the notebook cell
        `cell_id` (None: unknown)."""
        loop = self._loop(observer=observer, ask=ask, demo=demo, **options)
        cells = self.user_cells.digest(self.config.user_cells_chars, self.config.secrets())
        try:
            result = loop.run(prompt, user_cells=cells.text, cell_id=cell_id)
        except AgentError as exc:  # nothing was sent: the cells go with the next prompt
            raise self._run_error(f"tiny-agent-nb: {exc}") from None
        except KeyboardInterrupt:
            self.user_cells.forget(cells.through)
            raise
        finally:
            loop.close()
        self.user_cells.forget(cells.through)
        return result

    def stopped_run(self) -> Operation | None:
        """The run `%agent resume` would continue now (the planner's rule), if any; its
        `options` are what the resume keeps. A kernel that only reads the session has
        none: it cannot resume."""
        self._drop_closed_store()
        if self.store is None:
            return None
        if self.store.open_operation() is not None:
            return None
        stopped = resumable_run(self.store.operation_path())
        return None if isinstance(stopped, str) else stopped

    def replay(
        self, run_id: str, calls: Sequence[ToolIntent], *, cell_id: str | None, **options: Any
    ) -> Replayed:
        """`AgentLoop.replay` of `run_id`: no model is made, no MCP server started; only
        its `python` calls run again, under the approval of `options` (`run`'s)."""
        return self._call(
            lambda loop: loop.replay(run_id, calls, cell_id=cell_id),
            **{**options, "tools": ["python"], "provider": NO_MODEL, "with_mcp": False},
        )

    def resume(
        self, *, observer: LoopObserver, ask: AskFn | None, demo: bool = False, **options: Any
    ) -> RunResult:
        """`%agent resume`: `run`'s options, and the run's `recorded` ones (`continuing`)."""
        return self._call(AgentLoop.resume, observer=observer, ask=ask, demo=demo, **options)

    def compact(
        self,
        instructions: str | None,
        *,
        observer: LoopObserver,
        demo: bool = False,
        **options: Any,
    ) -> RunResult:
        """`%agent compact`; `options`: as `resume`'s."""
        return self._call(
            lambda loop: loop.compact(instructions),
            observer=observer,
            ask=None,
            demo=demo,
            **options,
        )

    def _call(self, what: Callable[[AgentLoop], _R], **options: Any) -> _R:
        """`what` of a loop made with `options`, closed after."""
        loop = self._loop(**options)
        try:
            return what(loop)
        except AgentError as exc:
            raise self._run_error(refusal_line(exc)) from None
        finally:
            loop.close()

    def _run_error(self, message: str) -> NotebookError:
        """A run the session file refused: said as the file's own fate when its path
        names another file now (the loop only knows its commit was refused)."""
        store = self.store
        if store is not None and not store.closed and store.moved() is not None:
            self._drop_closed_store()
            return NotebookError(self.open_error or message)
        return NotebookError(message)

    def _loop(self, **options: Any) -> AgentLoop:  # `LoopBuilder.build`'s options
        store = self.require_store()
        return self.loops.build(store, stopped_by=self.stopped_by, **options)
