"""`tiny-agent-nb usage FILE`: tokens and cost per run, and the totals."""

from __future__ import annotations

import argparse
from typing import Any

from ..session import SessionState, UsageTotals
from ..timeline import RunUsage, session_cost, usage_by_run, usage_lines
from ._common import EXIT_OK, _print_json, _read


def configure_usage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a session file (*.jsonl)")
    parser.add_argument(
        "--json", action="store_true", help='print {"usage": ...} instead of a table'
    )


def run_usage(args: argparse.Namespace) -> int:
    path: str = args.file
    state = _read(path)
    if args.json:
        _print_json({"usage": usage_json(state, usage_by_run(state))})
    else:
        print("\n".join(usage_lines(state)))
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
