"""`tiny-agent-nb usage FILE`: tokens and cost per run, and the totals."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from ..session import (
    SessionState,
    UsageTotals,
)
from ..timeline import RunUsage, session_cost, usage_by_run
from ..words import NO_USAGE, money, printable
from ._common import EXIT_OK, _print_json, _read
from ._inspect import _cost

# ---------------------------------------------------------------- usage


def _configure_usage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a session file (*.jsonl)")
    parser.add_argument(
        "--json", action="store_true", help='print {"usage": ...} instead of a table'
    )


def run_usage(args: argparse.Namespace) -> int:
    path: str = args.file
    state = _read(path)
    runs = usage_by_run(state)
    if args.json:
        _print_json({"usage": usage_json(state, runs)})
    else:
        print("\n".join(render_usage(state, runs)))
    return EXIT_OK


def _usage_record(t: UsageTotals, cost: tuple[float | None, int]) -> dict[str, Any]:
    return {
        **t.summary(),
        "cost": cost[0],
        "usageRecords": t.priced + t.unpriced,
        "unpricedRecords": t.unpriced,
    }


def usage_json(state: SessionState, runs: list[RunUsage]) -> dict[str, Any]:
    """`cost` is null when no usage record reports one (unknown, never 0); with
    `unpricedRecords` > 0 and a number, it is a lower bound."""
    return {
        "sessionId": state.header.id,
        "runs": [
            {
                "operationId": r.operation_id,
                "kind": r.kind,
                "status": r.status,
                **_usage_record(r.totals, r.cost),
                "unreportedAttempts": r.unreported_attempts,
            }
            for r in runs
        ],
        "totals": _usage_record(state.totals, session_cost(state)),
    }


USAGE_COLUMNS = ("input", "output", "reasoning", "cached")


def render_usage(state: SessionState, runs: list[RunUsage]) -> list[str]:
    """The table of `usage`: one row per run, then the totals and what the marks mean."""
    rows = [
        [str(r.number), r.kind, r.status, *_cells(r.totals, r.cost), r.operation_id] for r in runs
    ]
    total = ["", "total", "", *_cells(state.totals, session_cost(state)), ""]
    reported = _reported(state.totals, session_cost(state))
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
        f"total cost   {_cost(state) if reported else NO_USAGE}",
    ]
    lines.extend(_usage_notes(runs))
    return lines


def _reported(t: UsageTotals, cost: tuple[float | None, int]) -> bool:
    """Whether anything reported usage: a usage record, or an answer that reported none."""
    return bool(t.priced or t.unpriced or cost[1])


def _cells(t: UsageTotals, cost: tuple[float | None, int]) -> list[str]:
    """The token and cost cells of a row; `-` in each where no usage was reported (a run
    whose every request failed), never zeros for what nobody reported."""
    if not _reported(t, cost):
        return ["-"] * (len(USAGE_COLUMNS) + 1)
    return [*_token_cells(t), money(*cost)]


def _token_cells(t: UsageTotals) -> list[str]:
    return [
        str(t.input_tokens),
        str(t.output_tokens),
        str(t.reasoning_tokens),
        str(t.cached_input_tokens),
    ]


def _usage_notes(runs: list[RunUsage]) -> Iterator[str]:
    if any(not _reported(r.totals, r.cost) for r in runs):
        yield "-            no usage reported: no request of that run was answered"
    if any(r.cost[0] is None for r in runs):
        yield "unknown      the provider reported no cost for that run's usage (not counted as $0)"
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
