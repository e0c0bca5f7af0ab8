"""The agent loop: the imperative shell that talks to the model, runs tools and commits.

Commits of one run (each line one transaction, each before its effect):

    [user entry, runStarted]
    stepAttempt                      -> HTTP request (one physical request)
    [assistant entry, usage]         or [attemptFailed, usage] (-> retry as a new stepAttempt)
    toolStarted                      -> the tool's effect
    tool result entry                (+ usage, for tools that report it)
    ... next stepAttempt ...
    operationFinished

Before a stepAttempt the run may first compact (_compaction.py). Every end goes through
one door, `OperationGuard.end` (_operation.py); a step's attempts are `ModelStep`'s, tool
calls `ToolStep`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..provider import messages as m
from ..session import (
    AssistantEntry,
    NewFact,
    RunOptions,
    SessionState,
    SessionStore,
    ToolIdentity,
    ToolIntent,
    new_id,
    sha256_digest,
)
from ..session import facts as f
from ..tools import ToolContext, ToolRegistry
from ..words import clean_unicode
from ._budget import budget_reached
from ._compaction import AttemptLabel, CompactionFailed, Compactor
from ._context import build_context
from ._kernel_notice import due_kernel_notice
from ._model_step import ModelStep
from ._operation import OperationGuard
from ._planner import plan_recovery, resumable_operation
from ._replay import Replayed, replay_run
from ._summarize import NoRoom
from ._tool_step import AskFn, ToolStep
from ._types import (
    AgentError,
    ChatProvider,
    LoopConfig,
    LoopObserver,
    RecoveryReport,
    RunResult,
    StepsReached,
)
from ._window import RunWindow

# Seconds all the replays of one recovery may take together (each read also has its own
# limit); the reads left when it runs out are settled as interrupted, not replayed.
RECOVERY_REPLAY_BUDGET = 30.0
PROMPT_REDACTED = (
    "the prompt holds a configured secret (the API key, a credential); it is sent and kept "
    "as [redacted]."
)


class AgentLoop:
    def __init__(
        self,
        store: SessionStore,
        provider: ChatProvider,
        tools: ToolRegistry,
        context: ToolContext,
        config: LoopConfig,
        *,
        ask: AskFn | None = None,
        observer: LoopObserver | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        stopped_by: Callable[[], str | None] | None = None,
    ) -> None:
        """`stopped_by`: asked when a KeyboardInterrupt stops a run, what
        sent it when not the user (a kernel restart), as the abort's reason."""
        self._store = store
        self._tools = tools
        self._config = config
        self._observer = observer or LoopObserver()
        self._clock = clock
        self._schemas = tools.schemas()
        asked = config.provider
        # Recorded with each run and resume it starts: what a later resume of it uses.
        self._options = RunOptions(
            approve=config.approval,
            tools=list(tools.names),
            budget=config.budget,
            maxSteps=config.max_steps,
            model=asked.model,
        )
        self._tool_step = ToolStep(store, tools, context, config.approval, ask)
        self._environment = self._tool_step.environment
        self._operations = OperationGuard(
            store, self._tool_step.clean, stopped_by, self._observer.on_closing
        )
        servers = {"mcpServers": list(config.mcp_servers)} if config.mcp_servers else {}
        digest = sha256_digest(
            {
                **asked.digest_material(),
                **servers,
                "systemPrompt": config.system_prompt,
                "tools": [
                    {"name": s.name, "version": s.version, "schema": dict(s.parameters)}
                    for s in self._schemas
                ],
            }
        )
        self._label = label = AttemptLabel(asked.provider, asked.model, digest)
        tool_bytes = m.tools_size(self._schemas)
        system = m.size(m.System(config.system_prompt)) if config.system_prompt else 0
        key = asked.window_key if asked.redacted_base_url else None
        self._compactor = Compactor(
            store,
            provider,
            label,
            window=RunWindow(
                store, configured=config.context_window, key=key, listed=config.listed_window
            ),
            threshold=config.compact_threshold,
            keep_tail_tokens=config.keep_tail_tokens,
            request_bytes=lambda: (
                len(m.encode(build_context(store.load(), config.system_prompt))) + tool_bytes
            ),
            fixed_bytes=system + tool_bytes,
            on_compaction=self._observer.on_compaction,
            clean=self._tool_step.clean,
        )
        self._model = ModelStep(
            store,
            provider,
            config,
            self._operations,
            schemas=self._schemas,
            label=label,
            compactor=self._compactor,
            tool_step=self._tool_step,
            observer=self._observer,
            sleep=sleep,
            tool_bytes=tool_bytes,
        )

    @property
    def configuration_digest(self) -> str:
        return self._label.configuration_digest

    def close(self) -> None:
        """The loop holds nothing open (its context is built per request); its callers
        close what they make all the same."""

    # ------------------------------------------------------------------ entry points
    def run(
        self, prompt: str, *, user_cells: str | None = None, cell_id: str | None = None
    ) -> RunResult:
        """Run a prompt. `user_cells`: what the user ran since the previous prompt, sent
        before it and kept with it in its user entry (docs/spec.md §6), secrets redacted;
        `cell_id`: the notebook cell it runs in, when known (docs/spec.md §12)."""
        self._require_idle()
        # A prompt filled from a variable may hold the key: redacted, and said, here.
        prompt, given = self._tool_step.clean(prompt), clean_unicode(prompt)
        if prompt != given:
            self._observer.on_notice(PROMPT_REDACTED)
        entry_id, operation_id = new_id(), new_id()
        cells = self._tool_step.clean(user_cells) if user_cells else None
        # Told before the prompt, in the same transaction: the model reads the kernel
        # changed, then what the user asks in the new one.
        start = [
            *self._kernel_notice(),
            f.user_message(prompt, user_cells=cells, id=entry_id),
            f.run_started(operation_id, entry_id, self._options, cell_id=cell_id),
        ]
        return self._operations.run(start, operation_id, self._steps)

    def resume(self) -> RunResult:
        """Continue the latest run if `resumable_operation` allows, under this loop's
        budget and step limit."""
        self.recover()
        state = self._store.load()
        target = resumable_operation(state)
        if isinstance(target, str):
            raise AgentError(
                "nothing to resume: no run was interrupted"
                if target != "open"
                else "an operation is still open"
            )
        operation_id = new_id()
        started = f.resume_started(operation_id, target.id, self._options)
        answer = _final_answer(state)
        if answer is not None:
            # Killed between the final answer and the run's end: asking again would only
            # make the model continue its own last message.
            detail = "the interrupted run had already given its final answer"
            return self._operations.run(
                [started],
                operation_id,
                lambda op: self._operations.end(op, "completed", text=answer, detail=detail),
            )
        return self._operations.run([started, *self._kernel_notice()], operation_id, self._steps)

    def recover(self) -> RecoveryReport | None:
        """Settle what a dead process left open (docs/spec.md §2.1). Idempotent. Ctrl-C
        during a replay settles the reads left as interrupted, then re-raises; a commit
        the file refuses raises AgentError, and the next load settles it."""
        state = self._store.load()
        plan = plan_recovery(state, self._tool_identities(), self._environment)
        if plan is None:
            return None
        what = f"recovering operation {plan.operation.id}"
        replayed: list[ToolIntent] = []
        interrupted = list(plan.interrupt)

        def closing_after_interrupt() -> list[NewFact]:
            # From the file: Ctrl-C may land just after a replay's result was committed.
            state = self._store.load()
            if state.open_operation is None:
                return []
            pending = [i for i in plan.replay if state.tool_intents[i.id].status == "pending"]
            return plan.closing_transaction(cancelled=pending)

        # A crafted file with many pending reads must not hold the load for their sum.
        deadline = self._clock() + RECOVERY_REPLAY_BUDGET
        skipped: list[ToolIntent] = []
        try:
            for intent in plan.replay:
                if self._clock() >= deadline:
                    skipped.append(intent)
                    continue
                (replayed if self._tool_step.replay(intent) else interrupted).append(intent)
            self._store.commit(plan.closing_transaction(skipped=skipped))
            interrupted += skipped
        except KeyboardInterrupt:
            self._operations.close(what, closing_after_interrupt)
            raise
        except Exception as exc:
            raise self._operations.unrecorded(what, exc) from exc
        return RecoveryReport(
            operation_id=plan.operation.id,
            replayed=tuple(replayed),
            interrupted=tuple(interrupted),
            failed_attempts=len(plan.fail),
            may_still_run=tuple(i for i in interrupted if self._may_outlive_kernel(i)),
        )

    def replay(
        self, run_id: str, calls: Sequence[ToolIntent], *, cell_id: str | None = None
    ) -> Replayed:
        """Replay the completed run `run_id` whose chain made `calls` (`_replay.py`)."""
        self._require_idle()
        return replay_run(
            self._store,
            self._operations,
            self._tool_step,
            self._observer,
            run_id=run_id,
            calls=calls,
            cell_id=cell_id,
        )

    def compact(self, instructions: str | None = None) -> RunResult:
        """`%agent compact`: an operation that only compacts. AgentError, nothing
        committed, when there is nothing to compact."""
        self._require_idle()
        try:
            self._compactor.check()
        except NoRoom as exc:
            raise AgentError(f"nothing to compact: {exc}", reason=exc.reason) from exc
        self._refuse_spent_budget()
        operation_id = new_id()
        end = self._operations.end

        def body(operation_id: str) -> RunResult:
            try:
                self._compactor.run(operation_id, 1, 1, instructions)
            except NoRoom as exc:  # its reason's statement is the detail
                return end(operation_id, "failed", reason=exc.reason)
            except CompactionFailed as exc:
                return end(operation_id, "failed", detail=self._tool_step.clean(str(exc)))
            return end(operation_id, "completed")

        return self._operations.run([f.compaction_started(operation_id)], operation_id, body)

    # ------------------------------------------------------------------ the loop
    def _steps(self, operation_id: str) -> RunResult:
        step = 0
        while True:
            step += 1
            if step > self._config.max_steps:
                steps = StepsReached(self._config.max_steps)
                return self._operations.end(operation_id, "stepLimit", reason=steps)
            outcome = self._model.run(operation_id, step)
            if isinstance(outcome, RunResult):
                return outcome
            attempt_id, completion = outcome
            calls = completion.message.toolCalls
            if not calls:
                return self._operations.end(
                    operation_id, "completed", text=completion.message.content
                )
            for index, call in enumerate(calls):
                # Before each call: a tool that reports its own cost (an MCP tool calling
                # a model) has it counted before the next one runs.
                over = self._model.over_budget(operation_id, not_run=len(calls) - index)
                if over is not None:
                    return self._operations.end(operation_id, "budgetLimit", reason=over)
                self._tool_step.run(operation_id, attempt_id, call, self._observer)

    # ------------------------------------------------------------------ helpers
    def _kernel_notice(self) -> list[NewFact]:
        """The notice a run starts with after a change of kernel (docs/spec.md §9)."""
        notice = due_kernel_notice(self._store)
        return [] if notice is None else [notice]

    def _tool_identities(self) -> dict[str, ToolIdentity]:
        return {
            name: tool.identity for name in self._tools.names if (tool := self._tools.get(name))
        }

    def _may_outlive_kernel(self, intent: ToolIntent) -> bool:
        """Whether a call the dead kernel left in flight may have started processes that
        outlive it (as this kernel's tool says)."""
        tool = self._tools.get(intent.tool.name)
        return tool is not None and tool.source == intent.tool.source and tool.may_outlive_kernel

    def _refuse_spent_budget(self) -> None:
        """A compaction after a stopped run spends that run's budget (`SessionState.spend`)."""
        budget, state = self._config.budget, self._store.load()
        stopped = resumable_operation(state)
        if budget is None or isinstance(stopped, str):
            return
        over = budget_reached(state.spend(stopped.id), budget)
        if over is not None:
            raise AgentError(f"nothing compacted: {over.statement()}", reason=over)

    def _require_idle(self) -> None:
        op = self._store.open_operation()
        if op is not None:
            raise AgentError(
                f"operation {op.id} is still open: its end could not be recorded. Resuming "
                "marks it interrupted and continues it; so does loading the session again"
            )


def _final_answer(state: SessionState) -> str | None:
    """The last entry's content when it is an answer with no tool calls."""
    last_entry = state.entries.last()
    if last_entry is None:
        return None
    last = last_entry.entry
    if isinstance(last, AssistantEntry) and not last.message.toolCalls:
        return last.message.content or ""
    return None
