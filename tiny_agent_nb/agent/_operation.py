"""How the loop opens an operation and ends it: every end goes through one door (`end`).

`run` commits an operation's start (a file that refuses it is the caller's error), then
runs its body, which ends the operation through `end`. When the body raises instead,
`run` ends it through the same door: KeyboardInterrupt commits `abort_settlement` with an
`aborted` end and is raised again; any other exception commits `failure_settlement` with
a `failed` end, so the next run can start. When even that commit fails, the error says
so rather than let the second error hide the first. An interrupt that lands once the end
is committed changes nothing: the run returns as the file says it ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..session import (
    NewFact,
    OperationOutcome,
    SessionClosedError,
    SessionReplacedError,
    SessionState,
    SessionStore,
    SessionWriteError,
)
from ..session import facts as f
from ..tools import truncate
from ._planner import abort_settlement, failure_settlement
from ._types import AgentError, RunResult, StopReason

log = logging.getLogger("tiny_agent_nb.agent")
MAX_DETAIL = 1000  # characters of an error message kept as a failed run's detail
USER_INTERRUPT = "interrupted by the user (KeyboardInterrupt)"  # an abort's reason


class OperationGuard:
    """Opens the loop's operations and ends each, whatever its body does."""

    def __init__(
        self,
        store: SessionStore,
        clean: Callable[[str], str],
        stopped_by: Callable[[], str | None] | None,
        closing: Callable[[], None],
    ) -> None:
        """`clean`: redacts what the file keeps; `stopped_by`: `AgentLoop`'s; `closing`:
        the observer's `on_closing`, called before every end is committed."""
        self._store = store
        self._clean = clean
        self._stopped_by = stopped_by
        self._closing = closing
        # The running operation's note on unknown costs (_budget.py), kept in its end.
        self.note: str | None = None
        self._ending: RunResult | None = None  # the end `end` commits (or has committed)

    def run(
        self, start: list[NewFact], operation_id: str, body: Callable[[str], RunResult]
    ) -> RunResult:
        """Commit `start`, then `body(operation_id)`, which ends the operation by `end`."""
        self.note = self._ending = None
        what = f"closing operation {operation_id}"
        starting = True
        try:
            self.start(start)
            starting = False
            return body(operation_id)
        except KeyboardInterrupt:
            reason = self._interrupted_by()
            ended = self._close(what, operation_id, "aborted", abort_settlement, reason)
            if not ended and self._ending is not None:
                return self._ending  # it came once the end was committed: it changes nothing
            raise
        except BaseException as exc:
            if starting:
                raise  # the file refused the start (`start`'s error): nothing is open
            error = truncate(f"{type(exc).__name__}: {exc}", MAX_DETAIL)
            detail = self._clean(
                f"stopped by an unexpected error ({error}); everything before it is kept in "
                "the session, and the next run starts normally"
            )
            if not self._close(what, operation_id, "failed", failure_settlement, detail):
                raise  # nothing was open: the start was refused (the caller's error)
            if not isinstance(exc, Exception):
                raise  # SystemExit and the like still end what they were meant to end
            log.error("run %s %s", operation_id, detail, exc_info=exc)
            return RunResult(operation_id, "failed", detail=detail)

    def end(
        self,
        operation_id: str,
        outcome: OperationOutcome,
        *,
        settled: Sequence[NewFact] = (),
        text: str | None = None,
        detail: str | None = None,
        reason: StopReason | None = None,
        stoppable: bool = True,
    ) -> RunResult:
        """The door every end goes through: `operationFinished`, with `settled` (a failed
        attempt, what an abort settles) in its transaction; its detail `reason`'s
        statement if given, then the run's note. `on_closing` first: a stop it raises (a
        Stop press taken before) ends the run aborted instead, unless this end is already
        an abort's or a failure's (`stoppable` False)."""
        if reason is not None:
            detail = self._clean(reason.statement())
        if self.note is not None:
            detail = f"{detail}; {self.note}" if detail else self.note
        try:
            self._closing()
        except KeyboardInterrupt:
            if stoppable:  # a stop taken before this moment: the run ends aborted instead
                if settled:
                    self._store.commit(list(settled))  # what happened before it
                raise
            # On the way to an end already decided (an abort, a failure), a stop changes
            # nothing, and must not cut the closing commit short.
        except Exception:
            log.exception("the observer failed before the operation's end")
        # Set before the commit: an interrupt held over it is raised at its end, and
        # `run` then finds the operation ended and this its end.
        self._ending = RunResult(operation_id, outcome, text=text, detail=detail, reason=reason)
        self._store.commit(
            [
                *settled,
                f.NewFact(
                    f.OperationFinished(operationId=operation_id, outcome=outcome, detail=detail)
                ),
            ]
        )
        return self._ending

    def _close(
        self,
        what: str,
        operation_id: str,
        outcome: OperationOutcome,
        settlement: Callable[[SessionState, str, str], list[NewFact] | None],
        detail: str,
    ) -> bool:
        """End the operation `outcome` from an except block, what was in flight settled;
        False when it is not open (never started, or its end committed)."""
        try:
            settled = settlement(self._store.load(), operation_id, detail)
            if settled is None:
                return False
            self.end(operation_id, outcome, settled=settled, detail=detail, stoppable=False)
        except Exception as exc:
            raise self.unrecorded(what, exc) from exc
        return True

    def _interrupted_by(self) -> str:
        """The abort's reason: the user's unless `stopped_by` names another (a second
        Ctrl-C cutting the question short leaves the user's: the abort must be recorded)."""
        try:
            reason = self._stopped_by() if self._stopped_by is not None else None
        except KeyboardInterrupt:
            reason = None
        return reason or USER_INTERRUPT

    def start(self, facts: list[NewFact]) -> None:
        """Commit an operation's start: before it nothing is open to record a failure in,
        so a file that refuses it (full disk, failed sync, moved) is this call's error."""
        try:
            self._store.commit(facts)
        except (SessionWriteError, SessionClosedError, SessionReplacedError) as exc:
            raise AgentError(f"the operation could not start: {exc}") from exc

    def close(self, what: str, transaction: Callable[[], list[NewFact]]) -> None:
        """Commit what settles a dead process's open operation, from an except block."""
        try:
            facts = transaction()
            if facts:
                self._store.commit(facts)
        except Exception as exc:
            raise self.unrecorded(what, exc) from exc

    def unrecorded(self, what: str, exc: Exception) -> AgentError:
        return AgentError(
            f"{what} could not be recorded in {self._store.path.name} "
            f"({type(exc).__name__}: {self._clean(str(exc))}). Everything committed "
            "before is kept; the operation stays open until the session is loaded again "
            "(e.g. in a new kernel), which marks it interrupted. If the disk is full, free "
            "space first."
        )
