"""One pure pass over a SessionState builds a page of timeline rows.

Payload is bounded: a page of runs, and within a run only the latest rows.
"""

from __future__ import annotations

import json

from ..session import SessionState, ToolIntent, ToolResultEntry, UserEntry
from ..words import cap, first_line, short_arguments
from ._calls import called_name, outcome_note
from ._compactions import compaction_notes
from ._kernels import kernel_boundaries
from ._models import session_models
from ._rows import AttemptRow, RunRow, Timeline, ToolRow, Totals
from ._usage import priced, unreported_attempts

PAGE_SIZE = 20  # runs per page
ROWS_PER_RUN = 60  # attempts (and, separately, tool intents) shown per run


def _attempt_status(state: SessionState, attempt_id: str) -> str:
    a = state.attempts[attempt_id]
    if a.status == "failed" and a.error is not None and a.error.kind in ("interrupted", "aborted"):
        return a.error.kind
    return a.status


def _tool_row(state: SessionState, i: ToolIntent) -> ToolRow:
    result = state.entries.get(i.result_entry_id)
    content = (
        result.entry.message.content
        if result is not None and isinstance(result.entry, ToolResultEntry)
        else None
    )
    u = state.usage.get(i.id)
    op = state.operations.get(i.operation_id)
    return ToolRow(
        id=i.id,
        attempt_id=i.attempt_id,
        name=called_name(state, i),
        source=i.tool.source,
        short_arguments=short_arguments(i.arguments),
        arguments=cap(json.dumps(i.arguments, ensure_ascii=False, indent=1), 4000),
        replay_policy=i.replay_policy,
        status=i.status,
        result=cap(content, 2000) if content is not None else None,
        note=outcome_note(i.status, op.aborted_reason if op is not None else None),
        input_tokens=u.inputTokens if u else None,
        output_tokens=u.outputTokens if u else None,
        cost=u.cost if u else None,
    )


def build_timeline(
    state: SessionState, *, page: int | None = None, page_size: int = PAGE_SIZE
) -> Timeline:
    """Rows for one page of runs (default: the last page, where new runs appear)."""
    operations = list(state.operations.values())
    pages = max(1, -(-len(operations) // page_size))
    page = pages - 1 if page is None else min(max(page, 0), pages - 1)
    shown = operations[page * page_size : (page + 1) * page_size]
    wanted = {op.id for op in shown}
    numbers = {op.id: n for n, op in enumerate(operations, start=1)}
    ledgers = state.usage_by_operation()
    unreported = unreported_attempts(state)
    compactions = compaction_notes(state)
    boundaries, idle_kernel = kernel_boundaries(state)

    attempts_by_op: dict[str, list[AttemptRow]] = {op_id: [] for op_id in wanted}
    for a in state.attempts.values():
        if a.operation_id not in wanted:
            continue
        u = state.usage.get(a.id)
        attempts_by_op[a.operation_id].append(
            AttemptRow(
                id=a.id,
                step=a.step,
                attempt=a.attempt,
                status=_attempt_status(state, a.id),
                model=a.model,
                input_tokens=u.inputTokens if u else None,
                output_tokens=u.outputTokens if u else None,
                cost=u.cost if u else None,
                latency_ms=a.ended_at - a.started_at if a.ended_at is not None else None,
                error=a.error.message if a.error else None,
                compaction=compactions.get(a.id),
            )
        )
    # Intents first, rows later: a row decodes the intent's result entry from its line,
    # and only the last ROWS_PER_RUN of a run are shown.
    intents_by_op: dict[str, list[ToolIntent]] = {op_id: [] for op_id in wanted}
    for i in state.tool_intents.values():
        if i.operation_id in wanted:
            intents_by_op[i.operation_id].append(i)

    runs = []
    for op in shown:
        entry = state.entries.get(op.input_entry_id) if op.input_entry_id else None
        prompt = (
            first_line(entry.entry.message.content)
            if entry is not None and isinstance(entry.entry, UserEntry)
            else None
        )
        attempts = attempts_by_op[op.id]
        intents = intents_by_op[op.id]
        # The run's ledger: its attempts' usage and its tools' usage (MCP tools report some).
        ledger = ledgers[op.id]
        cost, unpriced = priced(ledger, unreported[op.id])
        runs.append(
            RunRow(
                id=op.id,
                number=numbers[op.id],
                kind=op.kind,
                resumes=numbers.get(op.resumes_operation_id or op.replays_operation_id or ""),
                status=op.status,
                prompt=prompt,
                started_at=op.started_at,
                detail=op.detail or op.aborted_reason,
                attempts=tuple(attempts[-ROWS_PER_RUN:]),
                tools=tuple(_tool_row(state, i) for i in intents[-ROWS_PER_RUN:]),
                hidden_attempts=max(0, len(attempts) - ROWS_PER_RUN),
                hidden_tools=max(0, len(intents) - ROWS_PER_RUN),
                cost=cost,
                unpriced=unpriced,
                input_tokens=ledger.input_tokens,
                output_tokens=ledger.output_tokens,
                kernel=boundaries.get(numbers[op.id] - 1),
                usage_records=ledger.priced + ledger.unpriced,
            )
        )
    t = state.totals
    total_cost, total_unpriced = priced(t, sum(unreported.values()))
    return Timeline(
        session_id=state.header.id,
        path=state.path,
        models=session_models(state),
        runs=tuple(runs),
        page=page,
        pages=pages,
        totals=Totals(
            runs=len(operations),
            attempts=len(state.attempts),
            tool_intents=len(state.tool_intents),
            input_tokens=t.input_tokens,
            output_tokens=t.output_tokens,
            reasoning_tokens=t.reasoning_tokens,
            cached_input_tokens=t.cached_input_tokens,
            cost=total_cost,
            unpriced=total_unpriced,
            usage_records=t.priced + t.unpriced,
        ),
        torn_tail_bytes=state.torn_tail_bytes,
        kernel=idle_kernel if page == pages - 1 else None,
    )
