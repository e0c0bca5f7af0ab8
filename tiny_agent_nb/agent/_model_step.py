"""One model step of a run: stepAttempts (each one physical request, committed before
it is sent) until one settles, or the run's end.

A retryable failure becomes a new attempt after a backoff; a stream that ended with no
event is asked again at once without streaming; a context-length failure records the
window the server states (`_window`), compacts and retries once per step; anything else
ends the run `failed`. An answer whose token count suggests the server cut the prompt is
kept and said once per run (a count alone is no evidence of a window, docs/spec.md §8).
The budget is checked before each attempt, before and after a compaction, and before a
backoff; the loop checks it before each tool call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..provider import Completion, ProviderError, backoff_delay
from ..provider import messages as m
from ..session import NewFact, SessionState, SessionStore
from ..session import facts as f
from ..tools import ToolSchema
from ._budget import budget_reached, unknown_cost_note
from ._compaction import CONTEXT_LENGTH, AttemptLabel, Compacted, Compactor
from ._context import build_context
from ._operation import OperationGuard
from ._planner import attempt_failure, attempt_usage
from ._tool_step import ToolStep
from ._types import (
    BudgetReached,
    ChatProvider,
    ContextFull,
    LoopConfig,
    LoopObserver,
    RunResult,
)
from ._window import Measure, largest_count, truncated

MAX_ATTEMPTS = 5  # physical requests per step, the first one included


class ModelStep:
    """Asks the model for one step of a run."""

    def __init__(
        self,
        store: SessionStore,
        provider: ChatProvider,
        config: LoopConfig,
        operations: OperationGuard,
        *,
        schemas: Sequence[ToolSchema],
        label: AttemptLabel,
        compactor: Compactor,
        tool_step: ToolStep,
        observer: LoopObserver,
        sleep: Callable[[float], None],
        tool_bytes: int,  # the size of the tool schemas every request carries
    ) -> None:
        self._store = store
        self._operations = operations  # the door the step's ends go through
        self._tool_bytes = tool_bytes
        self._provider = provider
        self._config = config
        self._schemas = schemas
        self._label = label  # what each stepAttempt says of the model
        self._compactor = compactor
        self._tool_step = tool_step  # its secret filter cleans what the model sent
        self._observer = observer
        self._sleep = sleep
        # The system prompt the file says the model was sent last (read at the first
        # attempt): a request sending another one records it first (docs/spec.md §7).
        self._told: str | object | None = _UNREAD
        # The operation whose notice of a count that suggests a cut was said: once per run.
        self._cut_said: str | None = None
        # The attempt this step last sent, and the bytes of its messages and tools.
        self._sent: tuple[str, int] | None = None

    def run(self, operation_id: str, step: int) -> tuple[str, Completion] | RunResult:
        """The settled attempt's id and completion, or the (committed) end of the run."""
        too_long = False  # a contextLength failure compacts and retries once per step
        unstreamed: bool | None = None  # False: ask this attempt without streaming
        window = self._compactor.window
        for attempt in range(1, MAX_ATTEMPTS + 1):
            state, context, sent = self._context()
            ended = self._before_request(operation_id, step, attempt, sent)
            if isinstance(ended, RunResult):
                return ended
            if ended is not None:  # compacted: the context is another one now
                state, context, sent = self._context()
            previous = self._last_request(state)
            window.calibrate(previous)
            started = self._label.attempt(operation_id, step, attempt)
            attempt_id = started.id
            assert attempt_id is not None
            self._store.commit([*self._system_prompt_record(operation_id), started])
            self._told = self._config.system_prompt
            self._sent = (attempt_id, sent)
            last = attempt == MAX_ATTEMPTS
            try:
                completion = self._ask(context, unstreamed)
                _check_call_ids(completion)
                self._cut_notice(operation_id, completion, sent, previous)
            except ProviderError as error:
                # The provider hides its own secrets; a server may echo the others too.
                error.message = self._tool_step.clean(error.message)
                # Its usage counts for the budget checked before the retry.
                failed = attempt_failure(attempt_id, error, error.message)
                if error.empty_stream and unstreamed is None and not last:
                    unstreamed = False  # once per step, at once: the next request differs
                    self._store.commit(failed)
                    continue
                unstreamed = None
                if error.kind == CONTEXT_LENGTH:
                    learning = self._learning(error, attempt_id, sent)
                    failing = [*failed, *learning]
                    refused = self._compactor.refused(error.prompt_tokens, error.window, sent)
                    if not too_long and not last:
                        too_long = True  # compact, then retry as a new attempt, once
                        self._store.commit(failing)
                        window.learned_from(learning)
                        stopped = self._compactor.make_room(
                            operation_id, step, attempt, refused=refused, request_bytes=sent
                        )
                        if not isinstance(stopped, ContextFull):
                            continue
                        return self._operations.end(operation_id, "failed", reason=stopped)
                    full = self._compactor.too_long(error.message, refused=refused)
                    return self._operations.end(
                        operation_id, "failed", settled=failing, reason=full
                    )
                if not error.retryable or last:
                    detail = (
                        error.message
                        if not error.retryable
                        else f"gave up after {attempt} attempts: {error.message}"
                    )
                    return self._operations.end(
                        operation_id, "failed", settled=failed, detail=detail
                    )
                self._store.commit(failed)
                over = self.over_budget(operation_id)  # no backoff only to stop after it
                if over is not None:
                    return self._operations.end(operation_id, "budgetLimit", reason=over)
                delay = backoff_delay(attempt, error.retry_after)
                self._observer.on_retry(error, delay)
                self._sleep(delay)
                continue
            message = self._tool_step.clean_message(completion.message)
            completion = replace(completion, message=message)
            self._store.commit(_settle(attempt_id, completion))
            return attempt_id, completion
        raise AssertionError("unreachable: MAX_ATTEMPTS >= 1")

    def _system_prompt_record(self, operation_id: str) -> list[NewFact]:
        """The systemPrompt record to commit with the next stepAttempt, if it changed."""
        if self._told is _UNREAD:
            self._told = self._store.system_prompt()
        prompt = self._config.system_prompt
        return (
            []
            if self._told == prompt
            else [f.NewFact(f.SystemPrompt(operationId=operation_id, content=prompt))]
        )

    def _context(self) -> tuple[SessionState, list[m.Message], int]:
        """The state, the context the next request sends, and its bytes with the tools'."""
        state = self._store.load()
        context = build_context(state, self._config.system_prompt)
        return state, context, len(m.encode(context)) + self._tool_bytes

    def _ask(self, context: list[m.Message], stream: bool | None) -> Completion:
        on_event = self._observer.on_stream
        if stream is None:
            return self._provider.complete(context, self._schemas, on_event=on_event)
        return self._provider.complete(context, self._schemas, on_event=on_event, stream=stream)

    def _last_request(self, state: SessionState) -> Measure | None:
        """The newest answered request, as its server counted it."""
        tokens = state.last_input_tokens()
        if tokens is None:
            return None
        settled = (a for a in state.attempts_newest_first() if a.status == "settled")
        answered = next(settled)  # an answer is counted: `last_input_tokens`
        if self._sent is not None and self._sent[0] == answered.id:
            return Measure(tokens, self._sent[1])
        assert answered.entry_id is not None
        # Sent by an earlier loop (a notebook's earlier cell): what it sent, built again.
        context = build_context(state, self._config.system_prompt, until=answered.entry_id)
        return Measure(tokens, len(m.encode(context)) + self._tool_bytes)

    def _cut_notice(
        self, operation_id: str, completion: Completion, sent: int, previous: Measure | None
    ) -> None:
        """Say once per run when the server's count suggests it read only part of the
        request (docs/spec.md §8); nothing is recorded (`_window.largest_count`)."""
        usage = completion.usage
        if self._cut_said == operation_id or usage is None:
            return
        if not truncated(Measure(usage.input_tokens, sent), previous):
            return
        if usage.input_tokens < largest_count(self._store.load(), self._label.model):
            return  # fewer than it counted before: what its cache did not hold, no cut
        self._cut_said = operation_id
        self._observer.on_notice(
            f"the server counted {usage.input_tokens} input tokens of a request of about "
            f"{self._compactor.window.estimate(sent)}: it may have cut the start of the "
            "conversation without saying so (Ollama does, past its num_ctx), or it counts "
            "only the tokens its cache did not hold. The answer is kept and no window is "
            f"recorded; runs compact under a window of {self._compactor.window.describe()}"
        )

    def _learning(self, error: ProviderError, attempt_id: str, sent: int) -> list[NewFact]:
        """The window a refusal states, to commit with its failure (and said); the tokens
        it counted calibrate the estimate."""
        window = self._compactor.window
        if error.prompt_tokens is not None:
            window.calibrate(Measure(error.prompt_tokens, sent))
        learned = window.learning(error.window, attempt_id)
        if learned:
            self._observer.on_notice(
                f"the server refused more than {error.window} tokens: this session takes "
                "that as the model's context window from now on"
            )
        return learned

    def over_budget(self, operation_id: str, *, not_run: int = 0) -> BudgetReached | None:
        """Why a budgetLimit stop, when the run's spend is at or past its budget
        (docs/spec.md §4); `not_run`: the calls of the answer the stop leaves unrun."""
        budget = self._config.budget
        if budget is None:
            return None
        spend = self._store.spend(operation_id)
        if spend.unknown and self._operations.note is None:
            self._operations.note = unknown_cost_note(budget)
            self._observer.on_notice(self._operations.note)
        return budget_reached(spend, budget, not_run=not_run)

    def _before_request(
        self, operation_id: str, step: int, attempt: int, request_bytes: int
    ) -> RunResult | Compacted | None:
        """The budget, the room the request of `request_bytes` needs, then the budget again
        (a compaction is billed): the run's committed end when one stops it, else the
        compaction made, if any."""
        over = self.over_budget(operation_id)
        if over is not None:
            return self._operations.end(operation_id, "budgetLimit", reason=over)
        made = self._compactor.make_room(
            operation_id, step, attempt, refused=None, request_bytes=request_bytes
        )
        if isinstance(made, ContextFull):
            return self._operations.end(operation_id, "failed", reason=made)
        over = self.over_budget(operation_id)
        if over is not None:
            return self._operations.end(operation_id, "budgetLimit", reason=over)
        return made


_UNREAD = object()


def _check_call_ids(completion: Completion) -> None:
    """A protocol error when two tool calls of one answer share an id: a result names its
    call by id (docs/session-format.md §4, rule 6), and guessing could run an effect twice.
    The answer was billed all the same: its usage goes with the failure."""
    seen: set[str] = set()
    for call in completion.message.toolCalls:
        if call.id in seen:
            raise ProviderError(
                "The model's answer gave two of its tool calls the same id, so their results "
                "could not be told apart: the answer was dropped and none of its calls "
                "ran. This is the server's (or its chat template's) error; try again, or use "
                "another model or provider.",
                kind="protocol",
                retryable=False,
                usage=completion.usage,
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
