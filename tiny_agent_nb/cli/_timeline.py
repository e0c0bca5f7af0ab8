"""`tiny-agent-nb timeline FILE`: the notebook timeline's information as a terminal table."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from pydantic.alias_generators import to_camel

from ..render import timeline_text
from ..timeline import PAGE_SIZE, ROWS_PER_RUN, Timeline, build_timeline
from ..words import printable
from ._common import EXIT_OK, EXIT_USAGE, _Failed, _print_json, _read


def _page_number(text: str) -> int:
    try:
        page = int(text)
    except ValueError:
        page = 0
    if page < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a page number (1, 2, ...)")
    return page


def configure_timeline(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a session file (*.jsonl)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--page",
        type=_page_number,
        metavar="N",
        help=f"show page N of runs ({PAGE_SIZE} runs a page, 1 holds the oldest; "
        "default: the last page, where new runs appear)",
    )
    which.add_argument("--all", action="store_true", help="show every run, not one page")
    parser.add_argument(
        "--json", action="store_true", help='print {"timeline": ...} instead of a table'
    )


def run_timeline(args: argparse.Namespace) -> int:
    path: str = args.file
    state = _read(path)
    if args.all:
        timeline = build_timeline(state, page=0, page_size=max(1, len(state.operations)))
    else:
        timeline = build_timeline(state, page=None if args.page is None else args.page - 1)
        if args.page is not None and args.page > timeline.pages:
            runs = len(state.operations)
            message = (
                f"error: there is no page {args.page}: {printable(path)} holds {runs} run(s), "
                f"{timeline.pages} page(s) of up to {PAGE_SIZE}."
            )
            error = {"type": "PageOutOfRange", "page": args.page, "pages": timeline.pages}
            raise _Failed(EXIT_USAGE, message, error)
    if args.json:
        _print_json({"timeline": timeline_json(timeline)})
        return EXIT_OK
    print(timeline_text(timeline, color=_use_color(sys.stdout)))
    for line in _hidden_rows_lines(timeline):
        print(line)
    return EXIT_OK


def timeline_json(t: Timeline) -> dict[str, Any]:
    """The Timeline as JSON: camelCase keys, `page` 1-based like --page."""
    value: dict[str, Any] = _camel_keys(dataclasses.asdict(t))
    value["page"] = t.page + 1
    return value


def _camel_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {to_camel(str(k)): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_camel_keys(v) for v in value]
    return value


def _use_color(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except ValueError:  # closed
        return False


def _hidden_rows_lines(t: Timeline) -> Iterator[str]:
    """timeline_text lists only the latest rows of a long run; say what it left out."""
    hidden = [run for run in t.runs if run.hidden_attempts or run.hidden_tools]
    if not hidden:
        return
    yield ""
    yield (
        f"not shown: only the latest {ROWS_PER_RUN} attempts and {ROWS_PER_RUN} tool calls "
        "of a run are listed"
    )
    for run in hidden:
        yield (
            f"  {run.id}: {run.hidden_attempts} earlier attempt(s), "
            f"{run.hidden_tools} earlier tool call(s)"
        )
