"""One model step of a run: stepAttempts until one settles, then the run's end.

A step is one or more attempts (each one physical request, each committed as a
`stepAttempt` before it is sent). A retryable failure becomes a new attempt after a
backoff; a context-length failure compacts and retries once per step; anything else ends
the run `failed`. The run's budget is checked before each attempt, and the note about
unknown costs it may give is said once per run and kept in the run's detail: so this
class also closes the run (`finish`), whichever step or caller ends it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..provider import Completion, ProviderError, backoff_delay
from ..session import AssistantMessage, NewFact, OperationOutcome, SessionStore, new_id
from ..session import facts as f
from ..tools import ToolSchema
from ._budget import Spending, budget_reached, unknown_cost_note
from ._compaction import CONTEXT_LENGTH, Compactor, too_long_detail
from ._context import ContextProjection
from ._planner import attempt_usage
from ._tool_step import ToolStep
from ._types import ChatProvider, LoopConfig, LoopObserver, RunResult


class ModelStep:
    """Asks the model for one step of a run, and closes runs (with the budget's note)."""

    def __init__(
        self,
        store: SessionStore,
        provider: ChatProvider,
        config: LoopConfig,
        *,
        schemas: Sequence[ToolSchema],
        digest: str,
        projection: ContextProjection,
        compactor: Compactor,
        tool_step: ToolStep,
        observer: LoopObserver,
        sleep: Callable[[float], None],
    ) -> None:
        self._store = store
        self._provider = provider
        self._config = config
        self._schemas = schemas
        self._digest = digest
        self._projection = projection
        self._compactor = compactor
        self._tool_step = tool_step  # its secret filter cleans what the model sent
        self._observer = observer
        self._sleep = sleep
        self._cost_note: str | None = None
        self._spending = Spending(store, follow=config.budget is not None)

    def close(self) -> None:
        self._spending.close()

    def begin_run(self) -> None:
        self._cost_note = None  # said once per run (see _budget.py)

    def run(self, operation_id: str, step: int) -> tuple[str, Completion] | RunResult:
        """Attempts of one step until one settles; retryable failures become new attempts.

        Returns the settled attempt's id and completion, or the RunResult of a run this
        step ended (budget, compaction or provider failure), already committed."""
        too_long = False  # a contextLength failure compacts and retries once per step
        for attempt in range(1, self._config.max_attempts + 1):
            over = self._over_budget(operation_id)
            if over is not None:
                return self.finish(operation_id, "budgetLimit", detail=over)
            stopped = self._compactor.make_room(operation_id, step, attempt, forced=False)
            if stopped is not None:
                return self.finish(operation_id, "failed", detail=self._tool_step.clean(stopped))
            attempt_id = new_id()
            self._store.commit(
                [
                    f.step_attempt(
                        operation_id,
                        step=step,
                        attempt=attempt,
                        provider=self._config.provider,
                        model=self._config.model,
                        configuration_digest=self._digest,
                        id=attempt_id,
                    )
                ]
            )
            try:
                completion = self._provider.complete(
                    self._projection.messages(), self._schemas, on_event=self._observer.on_stream
                )
                _check_call_ids(completion.message)
            except ProviderError as error:
                failed = f.attempt_failed(
                    attempt_id,
                    kind=error.kind,
                    message=error.message,
                    retryable=error.retryable,
                    status=error.status,
                )
                last = attempt == self._config.max_attempts
                if error.kind == CONTEXT_LENGTH and not too_long and not last:
                    too_long = True  # compact, then retry as a new attempt, once
                    self._store.commit([failed])
                    stopped = self._compactor.make_room(operation_id, step, attempt, forced=True)
                    if stopped is None:
                        continue
                    return self.finish(
                        operation_id, "failed", detail=self._tool_step.clean(stopped)
                    )
                if error.kind == CONTEXT_LENGTH or not error.retryable or last:
                    detail = (
                        too_long_detail(self._compactor.window, error.message)
                        if error.kind == CONTEXT_LENGTH
                        else error.message
                        if not error.retryable
                        else f"gave up after {attempt} attempts: {error.message}"
                    )
                    self._store.commit(
                        [failed, f.operation_finished(operation_id, "failed", detail)]
                    )
                    return RunResult(operation_id, "failed", detail=detail)
                self._store.commit([failed])
                delay = backoff_delay(attempt, error.retry_after)
                self._observer.on_retry(error, delay)
                self._sleep(delay)
                continue
            message = self._tool_step.clean_message(completion.message)
            completion = replace(completion, message=message)
            self._store.commit(_settle(attempt_id, completion))
            return attempt_id, completion
        raise AssertionError("unreachable: max_attempts >= 1")

    def finish(
        self,
        operation_id: str,
        outcome: OperationOutcome,
        *,
        text: str | None = None,
        detail: str | None = None,
    ) -> RunResult:
        """Commit the run's operationFinished; its detail keeps what the cell said."""
        if self._cost_note is not None:
            detail = f"{detail}; {self._cost_note}" if detail else self._cost_note
        self._store.commit([f.operation_finished(operation_id, outcome, detail)])
        return RunResult(operation_id, outcome, text=text, detail=detail)

    def _over_budget(self, operation_id: str) -> str | None:
        """Checked before each attempt: the detail of a budgetLimit stop, else None."""
        budget = self._config.budget
        if budget is None:
            return None
        spend = self._spending.of(operation_id)
        if spend.unknown and self._cost_note is None:
            self._cost_note = unknown_cost_note(spend, budget)
            self._observer.on_notice(self._cost_note)
        return budget_reached(spend, budget)


def _check_call_ids(message: AssistantMessage) -> None:
    """A protocol error when two tool calls of one answer share an id: each result names
    its call by id (docs/spec.md §5, rule 6), so neither could be answered. Guessing which
    call is which (or that one is a repeat of the other) could run an effect twice."""
    seen: set[str] = set()
    for call in message.toolCalls:
        if call.id in seen:
            raise ProviderError(
                "The model's answer gave two of its tool calls the same id, so their results "
                "could not be told apart: the answer was dropped and none of its calls "
                "ran. This is the server's (or its chat template's) error; try again, or use "
                "another model or provider.",
                kind="protocol",
                retryable=False,
            )
        seen.add(call.id)


def _settle(attempt_id: str, completion: Completion) -> list[NewFact]:
    m = completion.message
    settled = f.assistant_message(
        attempt_id,
        content=m.content,
        tool_calls=m.toolCalls,
        reasoning=m.reasoning,
        refusal=m.refusal,
        finish_reason=m.finishReason,
    )
    return [settled, *attempt_usage(attempt_id, completion.usage)]
