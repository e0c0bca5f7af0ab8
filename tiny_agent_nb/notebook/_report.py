"""What the notebook says about its session: the report of `%load_ext`, `%agent session`
and `%agent new` on the session they opened, `%agent status`, `%agent summary`, and
`%agent forget-window`; and what to do next after a run stopped at a limit or a
compaction could not make room, in the notebook's words (its traits, `%%agent`'s options,
`%agent` commands): the engine states the reason and its figures, these lines follow.

Tool names and arguments come from the file: each goes through `render.cell_text`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..agent import (
    DEFAULT_CONTEXT_WINDOW,
    AgentError,
    BudgetReached,
    ContextFull,
    FixedFill,
    NoCleanCut,
    RecoveryReport,
    RunResult,
    StepsReached,
    StopReason,
    compaction_status,
    describe_origin,
    interrupted_rewind,
    resumable_operation,
)
from ..render import cell_text
from ..session import CompactionEntry, RunOptions, SessionState, SessionStore, ToolIntent
from ..session import facts as f
from ..timeline import (
    ModelName,
    call_outcome,
    cost_text,
    intent_label,
    outcome_note,
    rewinds_text,
    run_text,
    runs_text,
    session_cost,
    session_models,
)
from ..words import money, short_arguments, shorten, usd
from ._links import SessionLocation, kept_conversations
from ._provider import KernelProvider

if TYPE_CHECKING:  # the runtime reports through this module
    from ._runtime import NotebookRuntime


@dataclass
class OpenReport:
    location: SessionLocation
    created: bool
    repaired_tail_bytes: int
    state: SessionState
    recovery: RecoveryReport | None
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        s = self.state
        where = cell_text(self.location.path.name)
        if self.created:
            head = f"tiny-agent-nb: new session {where} ({_source(self.location)})."
            return "\n".join([head, *(f"  {note}" for note in self.notes)])
        cost = money(*session_cost(s))
        lines = [
            f"tiny-agent-nb: session {where} ({_source(self.location)}) — "
            f"{len(s.operations)} run(s), cost {cost}."
        ]
        if self.repaired_tail_bytes:
            lines.append(
                f"  Dropped {self.repaired_tail_bytes} torn bytes: an append cut short when the "
                "kernel died (never committed)."
            )
        r = self.recovery
        if r is not None and s.operations[r.operation_id].kind == "rewind":
            root = Path(s.header.environmentIdentity)
            lines.extend(f"  {line}" for line in interrupted_rewind(s, r.operation_id, root))
        elif r is not None:
            lines.append(
                "  The previous kernel stopped during a run; it is now marked interrupted."
            )
            for intent in r.interrupted:
                still = (
                    " A process it started may still be running."
                    if intent in r.may_still_run
                    else ""
                )
                # As %agent status says it (timeline.call_outcome), of the call recovery
                # is marking interrupted: the state read still holds it pending.
                lines.append(
                    f"  ⚠ {call_text(s, intent)} interrupted — "
                    f"{outcome_note('interrupted')}.{still}"
                )
            for intent in r.replayed:
                lines.append(f"  ↻ {call_text(s, intent)} — {outcome_note('replayed')}")
            if r.failed_attempts:
                lines.append(
                    f"  {r.failed_attempts} model request(s) in flight were marked interrupted."
                )
        latest = resumable_operation(s)  # the planner's rule, not a copy
        if not isinstance(latest, str):
            lines.append(
                f"  `%agent resume` continues {_STOPPED.get(latest.status, _STOPPED[''])}."
            )
        lines.extend(f"  {note}" for note in self.notes)
        return "\n".join(lines)


# What `%agent resume` would continue, by how the latest run ended.
_STOPPED = {
    "": "the interrupted run",
    "budgetLimit": "the run its budget stopped, given a larger `--budget USD`",
    "stepLimit": "the run max_steps stopped, for more steps",
}


def call_text(state: SessionState, intent: ToolIntent) -> str:
    """A recorded tool call on one line, for a cell's text: `timeline.intent_label` (the
    tool's name and where it comes from unless it is built in: `time__get_current_time ·
    mcp:time`) and its arguments; both from the file: escaped."""
    return cell_text(f"{intent_label(state, intent)} {short_arguments(intent.arguments)}").rstrip()


def _source(location: SessionLocation) -> str:
    return {
        "explicit": "set explicitly",
        "JPY_SESSION_NAME": "beside this notebook",
        "__vsc_ipynb_file__": "beside this notebook (VS Code)",
        "default": "no notebook name known; in the current directory",
    }[location.source]


def status_text(runtime: NotebookRuntime) -> str:
    """`%agent status`: the file, the model, the runs, what was cut off, cost, context."""
    out: list[str] = []
    state, read_only = runtime.read_state()
    open_op = state.open_operation
    latest = list(state.operations.values())[-1] if state.operations else None
    path = runtime.session_path()
    out.append(f"session  {cell_text(str(path))}" + (f" ({read_only})" if read_only else ""))
    forked = runtime.forked_from.get(state.header.id)
    if forked is not None:
        out.append(f"forked   from {cell_text(forked)}")
    kept = kept_conversations(path)
    if kept:
        shown = ", ".join(kept[-KEPT_SHOWN:])
        more = f" and {len(kept) - KEPT_SHOWN} earlier" if len(kept) > KEPT_SHOWN else ""
        out.append(f"kept     {cell_text(shown)}{more} (`%agent session NAME` opens one)")
    # The model the next run asks, and the ones the runs used when they differ (the
    # header's is only what was configured when the file was created).
    used = session_models(state)
    configured = runtime.session_model.asked()
    asked = ModelName(configured.provider, configured.model)
    if used.used in ((), (asked,)):
        out.append(f"model    {cell_text(str(asked))}")
    else:
        out.append(
            f"model    {cell_text(str(asked))} (configured in this kernel, for the next run)"
        )
        out.append(f"         this session's runs used {cell_text(used.described())}")
    out.append(f"runs     {runs_text(state)}; facts {state.last_seq}")
    rewinds = rewinds_text(state)
    if rewinds is not None:
        out.append(f"rewinds  {rewinds}")
    if open_op is not None:
        out.append(f"running  {open_op.id}")
    elif latest is not None:
        out.append(f"latest   {cell_text(run_text(latest))}")
    # The calls cut off in the latest run, or in the run `%agent resume` would continue
    # (a compaction may follow it); never those of a run since resumed: the resume
    # settled them, they are history.
    stopped = resumable_operation(state)
    runs = {latest.id if latest else "", "" if isinstance(stopped, str) else stopped.id}
    interrupted = [
        i
        for i in state.tool_intents.values()
        if i.status == "interrupted" and i.operation_id in runs
    ]
    for intent in interrupted[-5:]:  # as `tiny-agent-nb inspect` says each call
        out.append(f"  ⚠ {call_text(state, intent)} {cell_text(call_outcome(state, intent))}")
    if runtime.allowed_tools:  # "Allow <tool> for the rest of this session"
        allowed = cell_text(", ".join(sorted(runtime.allowed_tools)))
        out.append(f"allowed  {allowed}: every call, for the rest of this session (this kernel)")
    out.append(f"cost     {cost_text(state)}")  # as `tiny-agent-nb inspect` says it
    out.append(f"context  {window_line(runtime.provider, state)}")
    compacted = compaction_status(state)
    if compacted:
        out.append(f"         {compacted}")
        out.append(f"summary  {summary_line(state)}")
    return "\n".join(out)


KEPT_SHOWN = 3  # the newest conversations kept beside the session that status names
FORGET = "`%agent forget-window` forgets it"
SUMMARY_SHOWN = 240  # characters of the summary `%agent status` shows


def window_line(model: KernelProvider, state: SessionState) -> str:
    """The window the next run uses for the configured model, and where it comes from."""
    if model.config.demo_mode():
        return "the offline demo model has no context window"
    config = model.provider_config()
    learned = state.context_windows.get(config.window_key)
    said = ""
    if learned is not None:
        said = f"{learned.tokens} tokens, {describe_origin(learned.source)}"
    if model.config.context_window:
        line = f"window {model.config.context_window} tokens (TinyAgent.context_window)"
        return line + (f"; the session learned {said} ({FORGET})" if said else "")
    if said:
        return f"window {said} (kept in this session; {FORGET})"
    return (
        f"window {DEFAULT_CONTEXT_WINDOW} tokens by default, until the server states one "
        "(its metadata, or its answer to a request too long)"
    )


def forget_window(model: KernelProvider, store: SessionStore) -> str:
    """`%agent forget-window`: record that the session knows no window for the configured
    model at its server (docs/spec.md §8), so no kernel takes the learned one again."""
    if model.config.demo_mode():
        return "The offline demo model has no context window: nothing to forget."
    config = model.provider_config()
    key = config.window_key
    where = f"{cell_text(config.model)} at {cell_text(config.redacted_base_url)}"
    learned = store.learned_window(*key)
    if learned is None:
        return f"This session has learned no context window for {where}: nothing to forget."
    forgotten = f.ContextWindow(baseUrl=key[0], model=key[1], tokens=None, source="forgotten")
    store.commit([f.NewFact(forgotten)])
    said = f"{learned.tokens} tokens, {describe_origin(learned.source)}"
    return (
        f"Forgot the context window this session learned for {where} ({said}); the session "
        "file records it, so no kernel takes that window again. The next run takes "
        "TinyAgent.context_window when set, else the window the server's metadata states, "
        f"else {DEFAULT_CONTEXT_WINDOW} tokens."
    )


def latest_summary(state: SessionState) -> str | None:
    for entry_id in reversed(list(state.entries)):
        if state.entries.type_of(entry_id) == "compaction":
            body = state.entries[entry_id].entry
            assert isinstance(body, CompactionEntry)
            return body.summary
    return None


def summary_line(state: SessionState) -> str | None:
    """The start of the latest summary, for `%agent status`."""
    summary = latest_summary(state)
    if summary is None:
        return None
    return f"{cell_text(shorten(summary, SUMMARY_SHOWN))} (`%agent summary` shows it whole)"


def summary_text(state: SessionState) -> str:
    """`%agent summary`: the latest summary whole, as the model is sent it."""
    summary = latest_summary(state)
    if summary is None:
        return "No summary yet: the conversation has not been compacted."
    return (
        "The summary the model is sent in place of the earlier conversation (as its own "
        "note, not as your words):\n\n" + cell_text(summary, keep_lines=True)
    )


# ---------------------------------------------------------------- what to do next
RAISE_BUDGET = (
    "`%agent resume --budget USD`, with more than the run spent, goes on (a resume keeps "
    "the run's budget otherwise)"
)
APPROVALS = {
    "auto": "runs changes without asking",
    "ask": "asks before changes",
    "deny": "refuses changes",
}
MORE_STEPS = (
    "`%agent resume` gives the run more steps (`%agent resume --max-steps N` for N of them), "
    "or send a new prompt"
)
FEWER_FIXED = (
    'Next: offer fewer tools (`%%agent --tools read_file,python`, or `--tools ""` for none), '
    "a shorter TinyAgent.system_prompt, or a model served with a larger context window "
    "(TinyAgent.context_window, if the server's number is wrong)"
)
LESS_CONVERSATION = (
    "Next: `%agent compact` with instructions to keep less, a smaller "
    "TinyAgent.keep_tail_tokens, or `%agent new` to start a fresh session"
)
CONFIGURED_TOO_LARGE = (
    "Next: the server refused less than TinyAgent.context_window: set it to the window the "
    "model is served with, or to None to take the one the server states"
)
KEEP_LESS_VERBATIM = (
    "The conversation is as it was. A smaller TinyAgent.keep_tail_tokens keeps less of it "
    "verbatim, and leaves `%agent compact` more to summarize"
)


def resume_words(options: RunOptions) -> str:
    """What `%agent resume` continues a run with, as it recorded it: `asks before changes ·
    tools: bash · budget $0.05 · 25 steps · model M` (names escaped for a cell)."""
    named = options.tools[:4] if len(options.tools) <= 4 else options.tools[:3]
    more = len(options.tools) - len(named)
    tools = ", ".join(named) + (f" +{more} more" if more else "") if named else "none"
    budget = f"budget {usd(options.budget)}" if options.budget is not None else "no budget"
    return cell_text(
        f"{APPROVALS[options.approve]} · tools: {tools} · {budget} · "
        f"{options.maxSteps} steps · model {options.model}"
    )


def next_step(reason: StopReason | None) -> str | None:
    """The notebook's advice for `reason`; None when there is none to give."""
    if isinstance(reason, BudgetReached):
        return RAISE_BUDGET
    if isinstance(reason, StepsReached):
        return MORE_STEPS
    if isinstance(reason, ContextFull):
        refused = reason.refused
        if reason.origin == "configured" and refused and refused.request < reason.window:
            return CONFIGURED_TOO_LARGE
        return FEWER_FIXED if reason.what == "fixed" else LESS_CONVERSATION
    if isinstance(reason, FixedFill):  # a compaction could not make room
        return FEWER_FIXED
    if isinstance(reason, NoCleanCut):
        return KEEP_LESS_VERBATIM
    return None


def stated(result: RunResult) -> str:
    """The run's detail (escaped for a cell), then the advice its reason calls for."""
    detail = cell_text(result.detail or "")
    advice = next_step(result.reason)
    if advice is None:
        return detail
    return f"{detail}. {advice}" if detail else advice


def refusal_line(error: AgentError) -> str:
    """The cell's line for a request the loop refused: its words, then the advice its
    reason calls for (`%agent compact` with nothing to compact)."""
    advice = next_step(error.reason)
    return f"tiny-agent-nb: {error}." + (f" {advice}." if advice else "")


def outcome_line(result: RunResult) -> str | None:
    """The cell's last line after a run that did not complete, else None."""
    if result.outcome == "failed":
        return f"✗ The run failed: {stated(result)}"
    if result.outcome in ("stepLimit", "budgetLimit"):
        return f"‖ {stated(result)}."
    return None
