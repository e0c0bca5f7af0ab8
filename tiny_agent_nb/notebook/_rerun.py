"""An `%%agent` cell run again (docs/spec.md §12): when its prompt and options are those of
the latest run recorded for the same cell (its notebook cell id, `pre_run_cell`'s
`info.cell_id`), the cell shows that run instead of asking the model, so Restart & Run All
reproduces a notebook. A completed chain is *replayed* (its `python` calls run again,
nothing is sent); a stopped one says how it ended and offers Resume; a failed one, or no
match, asks the model. Without cell ids (a terminal) every run asks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..agent import LoopObserver, Replayed, RunResult, reruns_of, resumable_operation
from ..render import cell_text
from ..session import (
    AssistantEntry,
    Operation,
    RunOptions,
    SessionState,
    ToolIntent,
    UserEntry,
)
from ..tools import builtin_registry, clean_text
from ._cell_runs import CellRuns
from ._display import MARKS, CellDisplay
from ._loops import AskFn, chosen_options
from ._opening import NotebookError
from ._report import call_text
from ._runtime import NotebookRuntime

REPLAYED = "↻ replayed from the session: 0 model calls, $0"
STOPPED = frozenset({"interrupted", "aborted", "budgetLimit", "stepLimit"})


@dataclass(frozen=True)
class CellRun:
    """The recorded run a cell's execution matches, followed through its resumes."""

    run: Operation
    last: Operation  # the chain's last operation: how it ended
    calls: tuple[ToolIntent, ...]  # every call of the chain, in file order
    answer: str | None  # the chain's final answer


def cell_run(
    state: SessionState,
    *,
    cell_id: str | None,
    prompt: str,
    options: RunOptions,
    any_model: bool,
) -> CellRun | None:
    """The latest `run` of this cell (its id, or none on both sides) with this prompt and
    these options, or None. `any_model`: this kernel has no model configured and the cell
    names none, so the run's recorded model is the one it would use."""
    # Only runs on the conversation's path: a cell whose run a rewind left behind asks
    # the model anew (docs/spec.md §17).
    path = state.operation_path()
    runs = (
        op
        for op in reversed(path)
        if op.kind == "run"
        and op.cell_id == cell_id
        # No cell to tell runs apart: the latest with this prompt.
        and (cell_id is not None or _prompt(state, op) == prompt)
    )
    run = next(runs, None)
    if run is None or _prompt(state, run) != prompt or run.options is None:
        return None
    if not same_options(run.options, options, any_model=any_model):
        return None
    chain = [run]
    for op in path:
        if op.kind == "resume" and op.resumes_operation_id == chain[-1].id:
            chain.append(op)
    ids = {op.id for op in chain}
    calls = tuple(i for i in state.tool_intents.values() if i.operation_id in ids)
    return CellRun(run, chain[-1], calls, _answer(state, ids))


def same_options(recorded: RunOptions, wanted: RunOptions, *, any_model: bool) -> bool:
    """Whether a run recorded with `recorded` is what a cell with `wanted` would run. The
    tools compared are the built-in ones: which tools an MCP server offers is the
    server's, not the cell's."""
    builtins = set(builtin_registry().names)
    tools = {t for t in recorded.tools if t in builtins}
    return (
        recorded.approve == wanted.approve
        and recorded.budget == wanted.budget
        and recorded.maxSteps == wanted.maxSteps
        and (any_model or recorded.model == wanted.model)
        and tools == {t for t in wanted.tools if t in builtins}
    )


def _prompt(state: SessionState, op: Operation) -> str | None:
    if op.input_entry_id is None:
        return None
    body = state.entries[op.input_entry_id].entry
    return body.message.content if isinstance(body, UserEntry) else None


def _answer(state: SessionState, chain: set[str]) -> str | None:
    """The text of the chain's last assistant answer without tool calls."""
    for attempt in state.attempts_newest_first():
        if attempt.operation_id not in chain or attempt.entry_id is None:
            continue
        body = state.entries[attempt.entry_id].entry
        if isinstance(body, AssistantEntry) and not body.message.toolCalls:
            return body.message.content or body.message.refusal or ""
    return None


class CellReplays:
    """The cell id of the execution under way, and what an `%%agent` cell run again does
    instead of asking the model (`replay`)."""

    def __init__(
        self, runtime: NotebookRuntime, runs: CellRuns, resume: Callable[[], None]
    ) -> None:
        """`runs`: how the cell's runs are driven; `resume`: what the Resume button runs."""
        self.runtime = runtime
        self._runs = runs
        self._resume = resume
        self.cell_id: str | None = None

    def note_cell(self, info: Any) -> None:
        """IPython's pre_run_cell: the cell id the frontend sent with this execution
        (nbformat 4.5; None from a terminal or a frontend that sends none)."""
        cell_id = getattr(info, "cell_id", None)
        valid = isinstance(cell_id, str) and 0 < len(cell_id) <= CELL_ID_CHARS
        self.cell_id = cell_id if valid else None

    def replay(
        self, prompt: str, options: dict[str, Any], *, demo: bool, view: CellDisplay
    ) -> bool:
        """Show, instead of a new run, the run this cell already made with this prompt and
        these options; False when there is none to show (the cell asks the model)."""
        runtime = self.runtime
        try:
            state, read_only = runtime.read_state()
        except NotebookError:
            return False
        if self.cell_id is None or read_only is not None or state.open_operation is not None:
            return False
        wanted, any_model = self._options(options, demo)
        if wanted is None:
            return False
        found = cell_run(
            state,
            cell_id=self.cell_id,
            prompt=clean_text(prompt, runtime.config.secrets()),
            options=wanted,
            any_model=any_model,
        )
        if found is None or found.last.status == "failed":
            return False
        if found.last.status in STOPPED:
            self._stopped(state, found)
            return True
        done: list[Replayed] = []

        def go(_: LoopObserver, ask: AskFn) -> RunResult:
            # The lines are said once it is done, each with what the replay did of it.
            done.append(
                runtime.replay(found.run.id, found.calls, cell_id=self.cell_id, ask=ask, **options)
            )
            return done[0].result

        # Driven as a run is (its Stop button, its questions); the answer is the run's.
        if self._runs.drive(go, self._resume, view) is None:
            return True  # interrupted: said
        for line in replay_lines(state, found, done[0]):
            view.say(line)
        view.finish(found.answer)
        return True

    def _options(self, options: dict[str, Any], demo: bool) -> tuple[RunOptions | None, bool]:
        """The options a run of this cell would record, and whether its model is unknown
        (none configured, none named: the run's counts)."""
        runtime = self.runtime
        model = options.get("model")
        chosen = chosen_options(
            runtime.config,
            None,  # a cell's run continues none
            approve=options.get("approve"),
            budget=options.get("budget"),
            max_steps=options.get("max_steps"),
            tools=options.get("tools"),
        )
        try:
            tools = runtime.mcp.registry(chosen.tools, with_mcp=False).names
        except NotebookError:
            return None, False  # a tool of a server: the run decides, as today
        demo_model = runtime.session_model.uses_demo(model, demo)
        wanted = RunOptions(
            approve=chosen.approve,
            tools=list(tools),
            budget=chosen.budget,
            maxSteps=chosen.max_steps,
            model=runtime.session_model.asked(model, demo).model,
        )
        return wanted, demo_model and not demo and runtime.session_model.real

    def _stopped(self, state: SessionState, found: CellRun) -> None:
        last = found.last
        detail = f" — {cell_text(last.detail)}" if last.detail else ""
        print(
            f"■ This cell's run ended {last.status}{detail}. Nothing was sent: Run All does "
            "not continue a stopped run."
        )
        target = resumable_operation(state)
        if not isinstance(target, str) and target.id == last.id:
            print(
                "`%agent resume` (or the Resume button) continues it; `%%agent --rerun` asks again."
            )
            self._runs.offer_resume(self._resume)
        else:
            print("`%%agent --rerun` asks the model again (a later run stands between).")


CELL_ID_CHARS = 256  # the format's bound on a cellId (docs/session-format.md §2.3)


def replay_lines(state: SessionState, found: CellRun, replayed: Replayed) -> list[str]:
    """One line per call of the replayed chain (its recorded outcome, and what the replay
    did of it), then the replay's own line."""
    again = {intent.id: outcome for intent, outcome in replayed.reruns}
    rerunnable = {i.id for i in reruns_of(found.calls)}
    lines = []
    for intent in found.calls:
        call = call_text(state, intent)
        outcome = again.get(intent.id)
        if outcome is not None:
            note = f"ran again: {outcome}" if outcome != "denied" else "not run again: denied"
        elif intent.id in rerunnable:
            note = "not run again: an earlier call failed when run again"
        else:
            note = "not re-run"
        lines.append(f"{MARKS.get(intent.status, '·')} {call} — {intent.status}; {note}")
    lines.append(REPLAYED)
    result = replayed.result
    if result.outcome != "completed":
        lines.append(
            f"✗ The replay stopped: {cell_text(result.detail or result.outcome)}. What the calls "
            "after it defined is not restored; `%%agent --rerun` asks the model again."
        )
    return lines
