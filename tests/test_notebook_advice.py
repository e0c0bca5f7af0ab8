"""A run stopped at a limit is said in two parts in the cell: the engine's statement (the
recorded detail, the same on every surface), then the notebook's own advice, chosen by
the reason the engine returns, in the words the notebook always used."""

from __future__ import annotations

from tiny_agent_nb.agent import (
    AgentError,
    BudgetReached,
    ContextFull,
    FixedFill,
    NoCleanCut,
    RunResult,
    StepsReached,
    StopReason,
)
from tiny_agent_nb.notebook._report import outcome_line, refusal_line, stated
from tiny_agent_nb.session import OperationOutcome


def _stopped(outcome: OperationOutcome, reason: StopReason) -> RunResult:
    return RunResult("op", outcome, detail=reason.statement(), reason=reason)


def test_each_reason_is_stated_then_advised_in_the_notebooks_words() -> None:
    budget = BudgetReached(budget=0.01, spent=0.012, unknown=0, operations=2, not_run=1)
    assert outcome_line(_stopped("budgetLimit", budget)) == (
        "‖ budget $0.01 reached: this run (2 operations) spent $0.012; 1 tool call of the "
        "last answer did not run. `%agent resume --budget USD`, with more than the run "
        "spent, goes on (a resume keeps the run's budget otherwise)."
    )
    assert outcome_line(_stopped("stepLimit", StepsReached(1))) == (
        "‖ stopped after 1 model step (max_steps). `%agent resume` gives the run more steps "
        "(`%agent resume --max-steps N` for N of them), or send a new prompt."
    )
    full = ContextFull("conversation", 4000, "configured", "the tail alone is 3900 tokens")
    assert outcome_line(_stopped("failed", full)) == (
        "✗ The run failed: the conversation does not fit the model's context window (4000 "
        "tokens, as configured) even after compacting: the tail alone is 3900 tokens. "
        "Everything is kept in the session. Next: `%agent compact` with instructions to "
        "keep less, a smaller TinyAgent.keep_tail_tokens, or `%agent new` to start a fresh "
        "session"
    )
    fixed = ContextFull("fixed", 1500, "refusal", "the tools take 1840 tokens")
    said = outcome_line(_stopped("failed", fixed))
    assert said is not None and said.endswith(
        "Everything is kept in the session. Next: offer fewer tools (`%%agent --tools "
        'read_file,python`, or `--tools ""` for none), a shorter TinyAgent.system_prompt, '
        "or a model served with a larger context window (TinyAgent.context_window, if the "
        "server's number is wrong)"
    )


def test_a_statement_names_no_surface_and_a_run_without_a_reason_gets_no_advice() -> None:
    reasons: list[StopReason] = [
        BudgetReached(0.5, 0.6, 3, 1, 0),
        StepsReached(25),
        ContextFull("fixed", 1500, "configured", "x"),
        ContextFull("conversation", 1500, "default", "y"),
        FixedFill(fixed=1840, limit=1200, threshold=0.8, window=1500, freeable=90),
        NoCleanCut(kept=1000, share=0.25, window=4000, conversation=700),
    ]
    for reason in reasons:
        assert "TinyAgent" not in reason.statement() and "%agent" not in reason.statement()
    failed = RunResult("op", "failed", detail="HTTP 500 from the server")
    assert outcome_line(failed) == "✗ The run failed: HTTP 500 from the server"
    assert outcome_line(RunResult("op", "completed", text="hi")) is None


def test_a_compaction_that_cannot_make_room_is_stated_then_advised_in_the_notebooks_words() -> None:
    fixed = FixedFill(fixed=1840, limit=1200, threshold=0.8, window=1500, freeable=90)
    failed = RunResult("op", "failed", detail=fixed.statement(), reason=fixed)
    assert stated(failed) == (
        "the system prompt and the definitions of the tools offered alone take about 1840 "
        "tokens, not under 1200 (0.8 of the window of 1500 tokens), so no summary of the "
        "conversation can make room: it could free about 90 tokens at most. Next: offer "
        'fewer tools (`%%agent --tools read_file,python`, or `--tools ""` for none), a '
        "shorter TinyAgent.system_prompt, or a model served with a larger context window "
        "(TinyAgent.context_window, if the server's number is wrong)"
    )
    cut = NoCleanCut(kept=1000, share=0.25, window=4000, conversation=700)
    refused = AgentError(f"nothing to compact: {cut.statement()}", reason=cut)
    assert refusal_line(refused) == (
        "tiny-agent-nb: nothing to compact: no part of the conversation can be summarized: "
        "keeping the newest 1000 tokens verbatim (at most 25% of the window of 4000 tokens) "
        "leaves nothing before them that ends cleanly (every tool call with its result); the "
        "conversation since the last compaction takes about 700 tokens. The conversation is "
        "as it was. A smaller TinyAgent.keep_tail_tokens keeps less of it verbatim, and "
        "leaves `%agent compact` more to summarize."
    )
    assert refusal_line(AgentError("an operation is still open")) == (
        "tiny-agent-nb: an operation is still open."
    )
