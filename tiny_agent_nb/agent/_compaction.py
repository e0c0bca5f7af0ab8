"""Compaction (docs/spec.md §3): a model attempt that replaces early entries by a summary.

    stepAttempt                      -> summarization request (no tools)
    [compaction entry, usage]        or [attemptFailed, usage]

The compaction entry settles its attempt, so the context changes in one transaction or
not at all: a crash before it leaves a failed attempt and the context as it was. What is
summarized is `_summarize`'s. A compaction always makes room: a summary that would not
bring the context under the threshold fails its attempt instead of being kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .._exceptions import TinyAgentError
from ..provider import Completion, ProviderError
from ..provider import messages as m
from ..session import NewFact, SessionState, SessionStore, new_id
from ..session import facts as f
from ..timeline import compactions
from ..words import compaction_words, summary_tokens, usd
from ._planner import attempt_failure, attempt_usage
from ._summarize import Budget, Cut, NoRoom, choose_cut, summarization_request
from ._turns import CONTINUED_MESSAGE, summary_messages
from ._types import ChatProvider, ContextFull, FixedFill, Refused
from ._window import RunWindow

CONTEXT_LENGTH = "contextLength"  # ProviderError.kind of "the request is too long"


@dataclass(frozen=True)
class Compacted:
    """What one compaction did (the cell's line, the timeline and status say this)."""

    entry_id: str
    entries: int  # entries summarized
    tokens_before: int
    tokens_after: int
    cost: float | None  # USD; None when the server did not report it
    summary_tokens: int  # the summary's size (`words.summary_tokens`)


def compaction_line(c: Compacted) -> str:
    """One line for the cell: the compaction in the timeline's words, and its cost."""
    cost = usd(c.cost) if c.cost is not None else "cost unknown"
    words = compaction_words(c.entries, c.summary_tokens, c.tokens_before, c.tokens_after)
    return f"{words} · {cost}"


def compaction_status(state: SessionState) -> str | None:
    """`%agent status`'s line: how many checkpoints, the latest in the timeline's words."""
    rows = compactions(state)
    if not rows:
        return None
    latest = rows[-1]
    usage = state.usage.get(latest.attempt_id or "")
    cost = "cost unknown" if usage is None or usage.cost is None else usd(usage.cost)
    return f"{len(rows)} compaction(s); the latest {latest.words} · {cost}"


class CompactionFailed(TinyAgentError):
    """The summarization attempt failed (its attemptFailed is committed)."""


@dataclass(frozen=True)
class AttemptLabel:
    """What each stepAttempt of a run says about the model (its compactions' too)."""

    provider: str
    model: str
    configuration_digest: str

    def attempt(self, operation_id: str, step: int, attempt: int) -> NewFact:
        """A new stepAttempt (its id reserved: the attempt's id)."""
        record = f.StepAttempt(
            operationId=operation_id,
            step=step,
            attempt=attempt,
            provider=self.provider,
            model=self.model,
            configurationDigest=self.configuration_digest,
        )
        return f.NewFact(record, new_id())


class Compactor:
    """Decides when a run needs room and makes it (the loop calls it before attempts)."""

    def __init__(
        self,
        store: SessionStore,
        provider: ChatProvider,
        label: AttemptLabel,
        *,
        window: RunWindow,
        threshold: float,
        keep_tail_tokens: int,
        request_bytes: Callable[[], int],
        fixed_bytes: int,
        on_compaction: Callable[[Compacted], None],
        clean: Callable[[str], str],
    ) -> None:
        """`request_bytes`: the size of the request the run would send now (built: a step
        gives the size of the one it built instead); `fixed_bytes`:
        the part no compaction changes (system prompt, tool schemas); `clean`: the run's
        secret filter."""
        self._on_compaction = on_compaction
        self._clean = clean
        self._store = store
        self._provider = provider
        self._label = label
        self.window = window
        self._threshold = threshold
        self._keep_tail_tokens = keep_tail_tokens
        self._request_bytes = request_bytes
        self._fixed_bytes = fixed_bytes

    def context_tokens(self, request_bytes: int | None = None) -> int:
        """The larger of the last request's count and the next one's estimate (tool
        results since are not in the former)."""
        if request_bytes is None:
            request_bytes = self._request_bytes()
        estimate = self.window.estimate(request_bytes)
        return max(estimate, self._store.last_input_tokens() or 0)

    def limit(self) -> int:
        return int(self._threshold * self.window.tokens)

    def budget(self) -> Budget:
        return Budget(self.window.tokens, self._keep_tail_tokens)

    def check(self) -> None:
        """NoRoom when there is nothing to compact."""
        choose_cut(self._store.load(), self.budget(), self.window.estimate)

    def make_room(
        self,
        operation_id: str,
        step: int,
        attempt: int,
        *,
        refused: Refused | None,
        request_bytes: int,
    ) -> ContextFull | Compacted | None:
        """Compact when the context (a request of `request_bytes`) passed its threshold,
        or the server refused the request as too long (`refused`). Why the run cannot go
        on, else the compaction made, if any."""
        self.window.record_listing()
        if refused is None and self.context_tokens(request_bytes) < self.limit():
            return None
        try:
            return self.run(operation_id, step, attempt, request_bytes=request_bytes)
        except NoRoom as exc:
            if refused is None:
                return None  # past the threshold is not yet too long: the request may fit
            fixed = isinstance(exc.reason, FixedFill)
            return self.too_long(str(exc), fixed=fixed, refused=refused)
        except CompactionFailed as exc:
            return self.too_long(str(exc), refused=refused)

    def too_long(
        self, cause: str, *, fixed: bool = False, refused: Refused | None = None
    ) -> ContextFull:
        what: Literal["fixed", "conversation"] = "fixed" if fixed else "conversation"
        return ContextFull(what, self.window.tokens, self.window.origin, cause, refused)

    def refused(self, request: int | None, window: int | None, request_bytes: int) -> Refused:
        fixed = self.window.estimate(self._fixed_bytes)
        if request is None:
            request = self.window.estimate(request_bytes)
        return Refused(request, fixed, window)

    def run(
        self,
        operation_id: str,
        step: int,
        attempt: int,
        instructions: str | None = None,
        *,
        request_bytes: int | None = None,
    ) -> Compacted:
        """One compaction. NoRoom before committing anything; CompactionFailed after
        committing the attempt's failure."""
        fixed = self.window.estimate(self._fixed_bytes)
        tokens_before = self.context_tokens(request_bytes)
        if fixed >= self.limit():  # checked first: it would be a summarization paid for nothing
            freeable = max(0, tokens_before - fixed)
            limit, window = self.limit(), self.window.tokens
            raise NoRoom(FixedFill(fixed, limit, self._threshold, window, freeable))
        state = self._store.load()
        budget = self.budget()
        cut = choose_cut(state, budget, self.window.estimate)
        chars_per_token = 1 / self.window.tokens_per_byte  # ASCII: a byte a character
        if instructions is not None:
            instructions = self._clean(instructions)
        messages = summarization_request(state, cut, instructions, budget, chars_per_token)
        attempt_id, completion = self._ask(messages, operation_id, step, attempt)
        summary = self._clean(completion.message.content or "").strip()
        problem: str | None = "the model answered the summarization request with no text"
        tokens_after = self._tokens_after(summary, cut)
        if summary:
            problem = self._too_large(summary, tokens_after)
        if problem:
            failure = ProviderError(problem, kind="protocol", retryable=False)
            self._fail(attempt_id, failure, attempt_usage(attempt_id, completion.usage))
            raise CompactionFailed(problem)
        entry_id = new_id()
        facts = [
            f.NewFact(
                f.CompactionEntry(
                    summary=summary,
                    throughEntryId=cut.through_entry_id,
                    attemptId=attempt_id,
                    tokensBefore=tokens_before,
                    tokensAfter=tokens_after,
                ),
                entry_id,
            )
        ]
        facts += attempt_usage(attempt_id, completion.usage)
        self._store.commit(facts)
        done = Compacted(
            entry_id=entry_id,
            entries=len(cut.entries),
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            cost=completion.usage.cost if completion.usage is not None else None,
            summary_tokens=summary_tokens(summary),
        )
        self._on_compaction(done)
        return done

    def _ask(
        self, messages: list[m.Message], operation_id: str, step: int, attempt: int
    ) -> tuple[str, Completion]:
        """The summarization attempt (and one more without streaming after an empty
        stream)."""
        stream: bool | None = None
        while True:
            started = self._label.attempt(operation_id, step, attempt)
            attempt_id = started.id
            assert attempt_id is not None
            self._store.commit([started])
            try:
                if stream is None:
                    return attempt_id, self._provider.complete(messages, [])
                return attempt_id, self._provider.complete(messages, [], stream=stream)
            except ProviderError as error:
                learned: list[NewFact] = []
                if error.kind == CONTEXT_LENGTH:
                    learned = self.window.learning(error.window, attempt_id)
                self._fail(attempt_id, error, learned)
                if error.empty_stream and stream is None:
                    stream = False
                    continue
                raise CompactionFailed(
                    f"the summarization request failed: {self._clean(error.message)}"
                ) from error

    def _tokens_after(self, summary: str, cut: Cut) -> int:
        """The context `summary` leaves: the system prompt, tools, summary and tail."""
        summary_bytes = len(m.encode([*summary_messages(summary), CONTINUED_MESSAGE]))
        return self.window.estimate(self._fixed_bytes + summary_bytes + cut.tail_bytes)

    def _too_large(self, summary: str, after: int) -> str | None:
        """Why `summary`, leaving `after` tokens, would not make room; None if it does."""
        if after < self.limit():
            return None
        return (
            f"the summary (~{summary_tokens(summary)} tokens) would leave about {after} tokens of "
            f"context, not under {self.limit()} ({self._threshold:g} of the window of "
            f"{self.window.describe()}), so it was not kept"
        )

    def _fail(self, attempt_id: str, error: ProviderError, extra: list[NewFact]) -> None:
        self._store.commit(
            [*attempt_failure(attempt_id, error, self._clean(error.message)), *extra]
        )
        self.window.learned_from(extra)
