"""How the loop opens an operation and makes sure it is closed: the run wrapper.

An operation's start is committed first (a file that refuses it is the caller's error,
nothing recorded). Then its body runs; KeyboardInterrupt anywhere commits
`abort_transaction` and is raised again; any other exception (a provider or tool
registry bug, a commit the store refused, a display that failed) commits
`failure_transaction`, so the run ends `failed` and the next one can start. When even
that closing commit fails, the error says so rather than let the second error hide the
first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..session import (
    NewFact,
    SessionClosedError,
    SessionReplacedError,
    SessionStore,
    SessionWriteError,
)
from ..tools import truncate
from ._planner import abort_transaction, failure_transaction
from ._types import AgentError, RunResult

log = logging.getLogger("tiny_agent_nb.agent")
MAX_DETAIL = 1000  # characters of an error message kept as a failed run's detail
USER_INTERRUPT = "interrupted by the user (KeyboardInterrupt)"  # an abort's reason


class OperationGuard:
    """Opens the loop's operations and closes each whatever its body does."""

    def __init__(
        self,
        store: SessionStore,
        clean: Callable[[str], str],
        stopped_by: Callable[[], str | None] | None,
        closing: Callable[[], None] | None = None,
    ) -> None:
        """`clean`: what a text the file keeps goes through (secrets redacted);
        `stopped_by`: the loop's (`AgentLoop`), what sent a KeyboardInterrupt when that
        was not the user; `closing`: the observer's `on_closing`, called before an abort
        or a failure is committed as before any other end."""
        self._store = store
        self._clean = clean
        self._stopped_by = stopped_by
        self._closing = closing

    def drive(self, operation_id: str, body: Callable[[str], RunResult]) -> RunResult:
        """`body(operation_id)`, the operation closed if it raises (see the module)."""
        what = f"closing operation {operation_id}"
        try:
            return body(operation_id)
        except KeyboardInterrupt:
            reason = self._interrupted_by()
            self._closing_quietly()
            self.close(what, lambda: abort_transaction(self._store.load(), operation_id, reason))
            raise
        except BaseException as exc:
            error = truncate(f"{type(exc).__name__}: {exc}", MAX_DETAIL)
            detail = self._clean(
                f"stopped by an unexpected error ({error}); everything before it is kept in "
                "the session, and the next run starts normally"
            )
            self._closing_quietly()
            self.close(what, lambda: failure_transaction(self._store.load(), operation_id, detail))
            if not isinstance(exc, Exception):
                raise  # SystemExit and the like still end what they were meant to end
            log.error("run %s %s", operation_id, detail, exc_info=exc)
            return RunResult(operation_id, "failed", detail=detail)

    def _closing_quietly(self) -> None:
        """`closing`, on the way to an end already decided: a stop it raises (taken just
        before) changes nothing, and must not cut the closing commit short."""
        if self._closing is None:
            return
        try:
            self._closing()
        except KeyboardInterrupt:
            pass
        except Exception:
            log.exception("the observer failed before the operation's end")

    def _interrupted_by(self) -> str:
        """The abort's reason; the user's when `stopped_by` names nothing else, or when a
        second Ctrl-C cuts its question short (the abort must still be recorded)."""
        try:
            reason = self._stopped_by() if self._stopped_by is not None else None
        except KeyboardInterrupt:
            reason = None
        return reason or USER_INTERRUPT

    def start(self, facts: list[NewFact]) -> None:
        """Commit an operation's start. Before it nothing is open to record a failure in:
        a file that refuses it (a full disk, a failed sync in power mode, a writer that
        closed itself after a failed cut, a path that names another file now) is this
        call's error, nothing recorded."""
        try:
            self._store.commit(facts)
        except (SessionWriteError, SessionClosedError, SessionReplacedError) as exc:
            raise AgentError(f"the operation could not start: {exc}") from exc

    def close(self, what: str, transaction: Callable[[], list[NewFact]]) -> None:
        """Commit the transaction that closes an operation, from inside an except block:
        if even that fails, say so rather than let the second error hide the first."""
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
