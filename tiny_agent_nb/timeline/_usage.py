"""The usage ledger per run and for the session: tokens, and the cost with what makes it
unknown or a lower bound (`words.money` writes it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from ..session import SessionState, UsageTotals
from ..words import NO_USAGE, money, printable, tokens


def unreported_attempts(state: SessionState) -> dict[str, int]:
    """Per run (operation id): its answered (settled) attempts with no usage record (a
    stream without a usage chunk), counted as unpriced, never as $0."""
    counts = dict.fromkeys(state.operations, 0)
    for a in state.attempts.values():
        if a.status == "settled" and a.id not in state.usage:
            counts[a.operation_id] += 1
    return counts


def priced(totals: UsageTotals, unreported: int = 0) -> tuple[float | None, int]:
    """(cost, unpriced) of a usage ledger, for `words.money`: the cost is None when
    something was used and nothing reported a cost; `unpriced` counts the usage records
    without a cost and the `unreported` answered attempts."""
    unpriced = totals.unpriced + unreported
    if totals.priced:
        return round(totals.cost, 12), unpriced
    return (None if unpriced else 0.0), unpriced


def session_cost(state: SessionState) -> tuple[float | None, int]:
    """`priced` of the whole session, as every surface says it."""
    return priced(state.totals, sum(unreported_attempts(state).values()))


@dataclass(frozen=True)
class RunUsage:
    """The usage ledger of one run: the usage facts of its attempts and tool intents."""

    number: int  # 1-based, in file order
    operation_id: str
    kind: str
    status: str
    totals: UsageTotals
    unreported_attempts: int  # pending attempts with no usage: tokens and cost unknown
    unpriced_attempts: int  # answered (settled) attempts that reported no usage
    detail: str | None = None  # a budgetLimit's budget and spend

    @property
    def cost(self) -> tuple[float | None, int]:
        return priced(self.totals, self.unpriced_attempts)


def usage_by_run(state: SessionState) -> list[RunUsage]:
    """Per-run sums of the usage ledger; together they are exactly `state.totals`."""
    totals = state.usage_by_operation()
    pending = Counter(
        a.operation_id
        for a in state.attempts.values()
        if a.status == "pending" and a.id not in state.usage
    )
    settled = unreported_attempts(state)
    return [
        RunUsage(
            n, op.id, op.kind, op.status, totals[op.id], pending[op.id], settled[op.id], op.detail
        )
        for n, op in enumerate(state.operations.values(), start=1)
    ]


def cost_text(state: SessionState) -> str:
    """`words.money` of the whole session, and what makes it a lower bound."""
    t = state.totals
    cost, unpriced = session_cost(state)
    unreported = unpriced - t.unpriced  # answered attempts that reported no usage
    why = ["the provider reported no cost"] if cost is None else []
    if cost is not None and t.unpriced:
        why.append(f"{t.unpriced} of {t.priced + t.unpriced} usage records have no cost")
    if cost is not None and unreported:
        why.append(f"{unreported} answered attempt(s) reported no usage")
    return money(cost, unpriced) + (f" ({'; '.join(why)})" if why else "")


USAGE_COLUMNS = ("input", "output", "reasoning", "cached")


def usage_lines(state: SessionState) -> list[str]:
    """The table of `tiny-agent-nb usage` and `%agent usage`: one row per run, then the
    totals and what the marks mean."""
    runs = usage_by_run(state)
    rows = [
        [str(r.number), r.kind, r.status, *_cells(r.totals, r.cost), r.operation_id] for r in runs
    ]
    cost = session_cost(state)
    total = ["", "total", "", *_cells(state.totals, cost), ""]
    reported = _reported(state.totals, cost)
    head = ["#", "kind", "status", *USAGE_COLUMNS, "cost", "run id"]
    table = [head, *rows, total]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    right = {0, 3, 4, 5, 6}  # numbers

    def line(cells: list[str]) -> str:
        text = "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )
        return text.rstrip()

    lines = [
        f"usage of {printable(state.path)}: {len(runs)} run(s), "
        f"{state.totals.priced + state.totals.unpriced} usage record(s)",
        "",
        line(head),
        *(line(row) for row in rows),
        line(total),
        "",
        f"total cost   {cost_text(state) if reported else NO_USAGE}",
    ]
    lines.extend(_usage_notes(runs))
    return lines


def _reported(t: UsageTotals, cost: tuple[float | None, int]) -> bool:
    """Whether anything reported usage: a usage record, or an answer that reported none."""
    return bool(t.priced or t.unpriced or cost[1])


def _cells(t: UsageTotals, cost: tuple[float | None, int]) -> list[str]:
    """The token and cost cells of a row; `-` in each where no usage was reported (a run
    whose every request failed), `unknown` tokens where only answers that reported none
    were: never zeros for what nobody reported (`words.tokens`)."""
    if not _reported(t, cost):
        return ["-"] * (len(USAGE_COLUMNS) + 1)
    counts = (t.input_tokens, t.output_tokens, t.reasoning_tokens, t.cached_input_tokens)
    if tokens(t.input_tokens, t.output_tokens, *cost) == "usage unknown":
        return ["unknown"] * len(USAGE_COLUMNS) + [money(*cost)]
    return [*map(str, counts), money(*cost)]


def _usage_notes(runs: list[RunUsage]) -> Iterator[str]:
    if any(not _reported(r.totals, r.cost) for r in runs):
        yield "-            no usage reported: no request of that run was answered"
    if any(r.cost[0] is None for r in runs):
        yield (
            "unknown      the provider reported no cost (or no usage) for that run (not "
            "counted as $0.00)"
        )
    if any(r.cost[0] is not None and r.cost[1] for r in runs):
        yield (
            "at least     a lower bound: some usage records of that run report no cost, or "
            "some of its answers reported no usage"
        )
    for r in runs:
        if r.status == "budgetLimit" and r.detail:
            yield f"run {r.number}      stopped by its budget: {printable(r.detail)}"
        if r.unreported_attempts:
            yield (
                f"run {r.number}      {r.unreported_attempts} attempt(s) still pending, with no "
                "usage record (in flight, or cut off when the kernel stopped): their tokens "
                "and cost were never reported and are not counted"
            )
