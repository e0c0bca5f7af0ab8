"""The timeline model: runs → attempts → tool intents → usage, from a SessionState.

One pure pass over the facts builds the rows that the notebook's HTML display,
the plain-text repr and `tiny-agent-nb timeline` all render, so they never disagree.
Payload is bounded: a page of runs, and within a run only the latest rows.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .session import (
    CompactionEntry,
    Kernel,
    KernelNotice,
    SessionState,
    ToolIdentity,
    ToolIntent,
    ToolResultEntry,
    UsageTotals,
    UserEntry,
)

PAGE_SIZE = 20  # runs per page
ROWS_PER_RUN = 60  # attempts (and, separately, tool intents) shown per run
PREVIEW = 160  # characters of a prompt, argument summary or result preview


# What a tool call's replay policy means after a crash, in the words every surface uses
# (the file says `safeRead` / `never`; docs/glossary.md). A policy is what recovery would
# do, not what happened: the timeline says it in a tooltip, never on the call's line.
REPLAY_WORDS = {"safeRead": "re-read after a crash", "never": "never re-run"}

# What happened to a call, where its status alone does not say it: a call re-run after a
# crash (`replayed`), one cut off by a crash or a stop (`interrupted`).
OUTCOME_WORDS = {
    "replayed": "re-read after a crash",
    "interrupted": "it may have run; it was not run again",
}


def outcome_note(status: str) -> str | None:
    """What happened to a call whose status is `status`, in words; None when the status
    says it all (`completed`, `error`, `denied`, `pending`)."""
    return OUTCOME_WORDS.get(status)


def replay_note(policy: str) -> str:
    """A call's replay policy as a tooltip says it: what recovery does with the call if a
    crash cuts it off (docs/spec.md §9.1)."""
    return f"replay policy: {REPLAY_WORDS.get(policy, policy)} if a crash cuts this call off"


BUILTIN = "builtin"  # the source of the package's own tools: not shown


def called_name(state: SessionState, intent: ToolIntent) -> str:
    """The name the model called the tool by, which `--tools` takes: an MCP tool's
    `<server>__<tool>` (`time__get_current_time`), where the intent's identity keeps the
    server's own name (`get_current_time`); a built-in tool's name is both."""
    attempt = state.attempts.get(intent.attempt_id)
    for call_id, name in attempt.tool_calls if attempt is not None else ():
        if call_id == intent.tool_call_id:
            return name
    return intent.tool.name


def tool_label(name: str, tool: ToolIdentity | str) -> str:
    """A tool call's name, and where the tool comes from when it is not built in:
    `time__get_current_time · mcp:time` (docs/glossary.md). `tool`: its identity, or
    its source."""
    source = tool if isinstance(tool, str) else tool.source
    return name if source == BUILTIN else f"{name} · {source}"


NO_USAGE = "no usage reported"


def tokens(input_tokens: int, output_tokens: int, cost: float | None, unpriced: int) -> str:
    """`12 in / 3 out`, or `usage unknown` when nothing reported any usage (the cost is
    unknown and no token was counted): never `0 in / 0 out` for a usage nobody reported."""
    if cost is None and unpriced and not (input_tokens or output_tokens):
        return "usage unknown"
    return f"{input_tokens} in / {output_tokens} out"


def shorten(text: str, limit: int = PREVIEW) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def whole_sentences(text: str, limit: int) -> str:
    """`text` on one line, at most `limit` characters: cut after its last sentence that
    fits, else after its last word that fits, and then marked `…`; never mid-sentence
    without a mark ("... is a required property. The tool")."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    ends = [m.end() for m in re.finditer(r"[.!?](?= )", text[: limit - 1])]
    cut = ends[-1] if ends else text.rfind(" ", 0, limit - 1)
    return text[: cut if cut > 0 else limit - 2] + " …"


_FENCE = ("```", "~~~")


def first_line(text: str, limit: int = PREVIEW) -> str:
    """What a run line shows of its prompt: the first line with words (a code fence's
    delimiters have none), `…` when more of the prompt follows."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    shown = next((line for line in lines if not line.startswith(_FENCE)), "")
    line = shorten(shown, limit)
    more = len(lines) > 1 and not line.endswith("…")
    return f"{line} …" if more else line


def cap(text: str, limit: int) -> str:
    """Cut without reflowing (for JSON and outputs shown in full in a details pane)."""
    return (
        text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"
    )


def short_arguments(arguments: dict[str, Any], limit: int = 80) -> str:
    """`command='ls -la'`-style summary: what a user recognises at a glance."""
    parts = [
        f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items() if v is not None
    ]
    return shorten(", ".join(parts), limit)


def unreported_attempts(state: SessionState) -> dict[str, int]:
    """Per run (operation id): its settled attempts with no usage record. The provider
    answered and reported no usage (a stream without a usage chunk), so their tokens and
    cost are unknown: they are counted as unpriced, never as $0."""
    counts = dict.fromkeys(state.operations, 0)
    for a in state.attempts.values():
        if a.status == "settled" and a.id not in state.usage:
            counts[a.operation_id] += 1
    return counts


def priced(totals: UsageTotals, unreported: int = 0) -> tuple[float | None, int]:
    """(cost, unpriced) of a usage ledger, for `render.money`: the cost is None when
    nothing reported one although something was used, and `unpriced` counts the usage
    records without a cost and the settled attempts without a usage record."""
    unpriced = totals.unpriced + unreported
    if totals.priced:
        return round(totals.cost, 12), unpriced
    return (None if unpriced else 0.0), unpriced


def session_cost(state: SessionState) -> tuple[float | None, int]:
    """`priced` of the whole session (its usage ledger and every answered attempt that
    reported no usage): the cost `%agent status`, `%agent usage`, the report of an opened
    session and the CLI all say."""
    return priced(state.totals, sum(unreported_attempts(state).values()))


@dataclass(frozen=True)
class RunUsage:
    """The usage ledger of one run: every usage fact of its attempts and tool intents."""

    number: int  # 1-based, in file order
    operation_id: str
    kind: str
    status: str
    totals: UsageTotals
    unreported_attempts: int  # pending attempts with no usage: tokens and cost unknown
    unpriced_attempts: int  # answered (settled) attempts that reported no usage
    detail: str | None = None  # the run's detail (a budgetLimit's budget and spend)

    @property
    def cost(self) -> tuple[float | None, int]:
        return priced(self.totals, self.unpriced_attempts)


def usage_by_run(state: SessionState) -> list[RunUsage]:
    """Per-run sums of the usage ledger; together they are exactly `state.totals`."""
    totals = state.usage_by_operation()
    unreported: Counter[str] = Counter(
        a.operation_id
        for a in state.attempts.values()
        if a.status == "pending" and a.id not in state.usage
    )
    settled = unreported_attempts(state)
    return [
        RunUsage(
            n,
            op.id,
            op.kind,
            op.status,
            totals[op.id],
            unreported[op.id],
            settled[op.id],
            op.detail,
        )
        for n, op in enumerate(state.operations.values(), start=1)
    ]


@dataclass(frozen=True)
class AttemptRow:
    id: str
    step: int
    attempt: int
    status: str  # settled | failed | interrupted | aborted | pending
    model: str
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None
    latency_ms: int | None
    error: str | None
    compaction: str | None = None  # what the attempt's compaction summarized


@dataclass(frozen=True)
class ToolRow:
    id: str
    attempt_id: str  # the model attempt whose answer asked for the call
    name: str  # the name the model called it by (`called_name`): time__get_current_time
    source: str  # the identity's source: `builtin`, `mcp:<server>`
    summary: str  # short arguments
    arguments: str  # full arguments, JSON (capped)
    replay_policy: str
    status: str  # pending | completed | error | interrupted | replayed | denied
    result: str | None  # preview of the result content
    # Usage the tool reported about its own call (an MCP tool that calls a model); None:
    # it reported nothing.
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None


@dataclass(frozen=True)
class KernelRow:
    """A kernel boundary: the kernel (a process) that wrote the runs after it, shown where
    it differs from the one that wrote the runs before (docs/spec.md §18)."""

    id: str  # its kernelOpened record
    number: int  # 1-based, counting changes of process in file order: "kernel 2"
    opened_at: int  # when it opened the session (epoch ms)
    started_at: int  # when its process started
    pid: int
    host: str
    kernel_id: str | None
    notebook: str | None
    notice: str | None  # what the model was told about it, once it was


@dataclass(frozen=True)
class RunRow:
    id: str
    number: int  # 1-based, in file order: "run 3"
    kind: str  # run | resume
    resumes: int | None  # a resume: the number of the run it continues
    status: str  # open | completed | failed | aborted | interrupted | stepLimit
    prompt: str | None  # its first line (`first_line`)
    started_at: int
    detail: str | None
    attempts: tuple[AttemptRow, ...]
    tools: tuple[ToolRow, ...]
    hidden_attempts: int
    hidden_tools: int
    cost: float | None  # with `unpriced`, for render.money (see `priced`)
    unpriced: int
    input_tokens: int
    output_tokens: int
    kernel: KernelRow | None = None  # a kernel boundary before this run
    usage_records: int = 0  # usage facts of its attempts and tools: 0, none reported

    def steps(self) -> list[tuple[AttemptRow | None, tuple[ToolRow, ...]]]:
        """Each shown attempt with the tool calls its answer asked for, in file order;
        first (None, calls) for the shown calls of attempts not shown (earlier ones)."""
        shown = {a.id for a in self.attempts}
        earlier = tuple(t for t in self.tools if t.attempt_id not in shown)
        by_attempt: list[tuple[AttemptRow | None, tuple[ToolRow, ...]]] = [
            (a, tuple(t for t in self.tools if t.attempt_id == a.id)) for a in self.attempts
        ]
        return [(None, earlier), *by_attempt] if earlier else by_attempt


@dataclass(frozen=True)
class Totals:
    runs: int
    attempts: int
    tool_intents: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cached_input_tokens: int
    cost: float | None
    unpriced: int  # usage facts with unknown cost
    usage_records: int = 0  # usage facts in the session: 0, none reported


@dataclass(frozen=True)
class Timeline:
    session_id: str
    path: str
    model: str
    provider: str
    runs: tuple[RunRow, ...]  # the current page, oldest first
    page: int
    pages: int
    totals: Totals
    torn_tail_bytes: int
    # The latest kernel when it has written no run yet (after the last run, or alone).
    kernel: KernelRow | None = None


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
    return ToolRow(
        id=i.id,
        attempt_id=i.attempt_id,
        name=called_name(state, i),
        source=i.tool.source,
        summary=short_arguments(i.arguments),
        arguments=cap(json.dumps(i.arguments, ensure_ascii=False, indent=1), 4000),
        replay_policy=i.replay_policy,
        status=i.status,
        result=cap(content, 2000) if content is not None else None,
        input_tokens=u.inputTokens if u else None,
        output_tokens=u.outputTokens if u else None,
        cost=u.cost if u else None,
    )


def compaction_token_estimate(text: str) -> int:
    """A summary's size in tokens, as every surface says it: its UTF-8 bytes / 4, the
    estimate a request's size starts from (docs/glossary.md)."""
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def compaction_words(
    entries: int, summary_tokens: int, tokens_before: int | None, tokens_after: int | None
) -> str:
    """One compaction, in the words the cell, the timeline, `%agent status` and the CLI
    share (docs/glossary.md): `compacted 12 entries into a summary of ~40 tokens: context
    ~191 → ~64 tokens`. Every size in tokens; `~`: estimates."""
    what = f"{entries} entries" if entries else "the earlier summary alone (too large)"
    words = f"compacted {what} into a summary of ~{summary_tokens} tokens"
    if tokens_before is not None and tokens_after is not None:
        return f"{words}: context ~{tokens_before} → ~{tokens_after} tokens"
    if tokens_before is not None:  # written before compactions recorded the size after
        return f"{words}: context ~{tokens_before} tokens before"
    return words


@dataclass(frozen=True)
class CompactionRow:
    """One compaction entry of the file, as `compaction_words` says it."""

    entry_id: str
    attempt_id: str | None  # the attempt that wrote it (None: written before they were named)
    words: str


def compactions(state: SessionState) -> list[CompactionRow]:
    """Every compaction in file order: how many entries it summarized since the previous
    cut (entries, not earlier compactions, as the compaction counted them), its summary's
    size and the context's size before and after it."""
    entries = state.entries
    ids = [i for i in entries if entries.type_of(i) == "compaction"]
    if not ids:
        return []  # the common case costs one pass over the entry types
    position: dict[str, int] = {}  # entries (not compactions) up to and including each
    count = 0
    for entry_id in entries:
        if entries.type_of(entry_id) != "compaction":
            count += 1
        position[entry_id] = count
    rows: list[CompactionRow] = []
    previous_cut = 0
    for entry_id in ids:
        body = entries[entry_id].entry
        assert isinstance(body, CompactionEntry)
        cut = position.get(body.throughEntryId, previous_cut)
        covered = max(0, cut - previous_cut)
        previous_cut = max(cut, previous_cut)
        size = compaction_token_estimate(body.summary)
        words = compaction_words(covered, size, body.tokensBefore, body.tokensAfter)
        rows.append(CompactionRow(entry_id, body.attemptId, words))
    return rows


def compaction_notes(state: SessionState) -> dict[str, str]:
    """Per attempt that wrote a compaction: `compaction_words` of it."""
    return {c.attempt_id: c.words for c in compactions(state) if c.attempt_id is not None}


def kernel_boundaries(state: SessionState) -> tuple[dict[int, KernelRow], KernelRow | None]:
    """The kernel boundary before each run (by its 0-based index) whose kernel is another
    process than the previous run's; and the latest kernel, when it wrote no run yet and
    is not the last run's."""
    kernels = list(state.kernels.values())
    numbers = dict.fromkeys((k.id for k in kernels), 0)
    for k, kernel in enumerate(kernels):
        new = k == 0 or not kernel.same_process(kernels[k - 1])
        numbers[kernel.id] = (numbers[kernels[k - 1].id] if k else 0) + new
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
                resumes=numbers.get(op.resumes_operation_id or ""),
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
        model=state.header.model,
        provider=state.header.provider,
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
