"""One pure pass over a SessionState builds a page of timeline rows: a page of runs, and
within a run only its latest rows, so what a display carries stays bounded."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from ..session import (
    Attempt,
    CompactionEntry,
    Kernel,
    KernelNotice,
    SessionState,
    ToolIntent,
    ToolResultEntry,
    UserEntry,
)
from ..words import cap, compaction_words, first_line, short_arguments, summary_tokens
from ._rows import AttemptRow, KernelRow, RunRow, Timeline, ToolRow, Totals, session_models
from ._usage import priced, unreported_attempts
from ._words import called_name, outcome_note, rewound_by

PAGE_SIZE = 20  # runs per page
ROWS_PER_RUN = 60  # attempts (and, separately, tool intents) shown per run


@dataclass(frozen=True)
class CompactionRow:
    entry_id: str
    attempt_id: str | None  # the attempt that wrote it (None: written before they were named)
    words: str  # `words.compaction_words` of it


def compactions(state: SessionState) -> list[CompactionRow]:
    """Every compaction in file order: how many entries (not earlier compactions) it
    summarized since the previous cut, its summary's size and the context's size before
    and after it."""
    entries = state.entries
    rows: list[CompactionRow] = []
    position: dict[str, int] = {}  # entries (not compactions) up to and including each
    count = previous_cut = 0
    for entry_id in entries:
        if entries.type_of(entry_id) != "compaction":
            count += 1
            position[entry_id] = count
            continue
        position[entry_id] = count
        body = entries[entry_id].entry
        assert isinstance(body, CompactionEntry)
        # The reducer holds the cut to an earlier entry, never before the previous cut.
        cut = position[body.throughEntryId]
        size = summary_tokens(body.summary)
        words = compaction_words(cut - previous_cut, size, body.tokensBefore, body.tokensAfter)
        rows.append(CompactionRow(entry_id, body.attemptId, words))
        previous_cut = cut
    return rows


def kernel_boundaries(state: SessionState) -> tuple[dict[int, KernelRow], KernelRow | None]:
    """The kernel boundary before each run (by its 0-based index) whose kernel is another
    process than the previous run's (docs/spec.md §9); and the latest kernel, when it
    wrote no run yet and is not the last run's."""
    kernels = list(state.kernels.values())
    numbers: dict[str, int] = {}
    number = 0
    for k, kernel in enumerate(kernels):
        number += _another(kernel, kernels[k - 1] if k else None)
        numbers[kernel.id] = number
    writers = state.run_kernels()
    boundaries = {
        n: _kernel_row(state, writer, numbers[writer.id])
        for n, writer in enumerate(writers)
        if writer is not None and _another(writer, writers[n - 1] if n else None)
    }
    latest, last = (kernels[-1] if kernels else None), (writers[-1] if writers else None)
    if latest is not None and latest.operations_before == len(writers) and _another(latest, last):
        return boundaries, _kernel_row(state, latest, numbers[latest.id])
    return boundaries, None


def _another(kernel: Kernel, before: Kernel | None) -> bool:
    return before is None or not kernel.same_process(before)


def _kernel_row(state: SessionState, kernel: Kernel, number: int) -> KernelRow:
    notice = None
    if kernel.notice_id is not None:
        body = state.entries[kernel.notice_id].entry
        notice = body.message.content if isinstance(body, KernelNotice) else None
    return KernelRow(
        id=kernel.id,
        number=number,
        opened_at=kernel.opened_at,
        started_at=kernel.started_at,
        pid=kernel.pid,
        host=kernel.host,
        kernel_id=kernel.kernel_id,
        notebook=kernel.notebook,
        notice=notice,
    )


def _attempt_status(a: Attempt) -> str:
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
    numbers = {op.id: n for n, op in enumerate(operations, start=1)}
    ledgers = state.usage_by_operation()
    unreported = unreported_attempts(state)
    notes = {c.attempt_id: c.words for c in compactions(state) if c.attempt_id is not None}
    boundaries, idle_kernel = kernel_boundaries(state)
    off_path = rewound_by(state)
    after_rewind = {
        op.id
        for before, op in itertools.pairwise(operations)
        if before.kind == "rewind" and op.kind != "rewind"
    }

    attempts_by_op: dict[str, list[AttemptRow]] = {op.id: [] for op in shown}
    for a in state.attempts.values():
        if a.operation_id not in attempts_by_op:
            continue
        u = state.usage.get(a.id)
        attempts_by_op[a.operation_id].append(
            AttemptRow(
                id=a.id,
                step=a.step,
                attempt=a.attempt,
                status=_attempt_status(a),
                model=a.model,
                input_tokens=u.inputTokens if u else None,
                output_tokens=u.outputTokens if u else None,
                cost=u.cost if u else None,
                latency_ms=a.ended_at - a.started_at if a.ended_at is not None else None,
                error=a.error.message if a.error else None,
                compaction=notes.get(a.id),
            )
        )
    # Intents first, rows later: a row decodes the intent's result entry from its line,
    # and only the last ROWS_PER_RUN of a run are shown.
    intents_by_op: dict[str, list[ToolIntent]] = {op.id: [] for op in shown}
    for i in state.tool_intents.values():
        if i.operation_id in intents_by_op:
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
                resumes=numbers.get(
                    op.resumes_operation_id
                    or op.replays_operation_id
                    or op.rewinds_operation_id
                    or ""
                ),
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
                rewound_by=off_path.get(op.id),
                follows=numbers.get(op.parent or "", 0) if op.id in after_rewind else None,
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
