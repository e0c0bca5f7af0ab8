"""What to do next after a run stopped at a limit, or a compaction that could not make
room, in the notebook's words: its traits, `%%agent`'s options and `%agent` commands. The
engine states the reason (the run's detail, recorded, or an AgentError's message) and
gives its figures (`RunResult.reason`, `AgentError.reason`); these lines follow the
statement."""

from __future__ import annotations

from ..agent import (
    AgentError,
    BudgetReached,
    ContextFull,
    FixedFill,
    NoCleanCut,
    RunResult,
    StepsReached,
    StopReason,
)
from ..render import cell_text
from ..session import RunOptions
from ..words import usd

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
