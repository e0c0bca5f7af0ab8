"""The command line's parser: what each subcommand is, says and runs (`COMMANDS`)."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from ._fork import configure_fork, run_fork
from ._inspect import configure_inspect, run_inspect
from ._rewind import configure_rewind, run_rewind
from ._salvage import configure_salvage, run_salvage
from ._timeline import configure_timeline, run_timeline
from ._usage import configure_usage, run_usage

WRITES = (
    "Look at tiny-agent-nb session files (JSONL) outside Jupyter. inspect, timeline and "
    "usage only read FILE; salvage and fork read FILE and write only the new file NEW; demo "
    "writes only in its own directory (--dir, else a new temporary one); rewind only with "
    "--yes appends to FILE and restores the workspace's files."
)
EXIT_CODES = """\
exit codes:
  0    success (salvage: something was salvaged into NEW)
  2    bad usage (a page or a run that does not exist, or a run that has not
       ended; NEW exists or is FILE)
  3    FILE is corrupt: a complete line is invalid, the error names it
       (salvage: even the header is invalid, nothing to salvage)
  4    FILE holds no session (empty, torn header, other data, not a regular
       file) or cannot be read (missing, unreadable)
  5    salvage or fork could not write NEW (disk full, directory not writable);
       FILE is untouched and no partial NEW is left
  141  the output's reader went away (`... | head`)"""


@dataclass(frozen=True)
class Command:
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tiny-agent-nb",
        description=textwrap.fill(WRITES, 79),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(
            name,
            help=command.help,
            description=command.help,
            epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(sub)
    return parser


def _configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the notebook runs and its session file is kept (default: a new temp dir)",
    )


def _run_demo(args: argparse.Namespace) -> int:
    # Imported here: the other subcommands must not need a Jupyter kernel client.
    from ..demo import main as demo_main  # noqa: PLC0415

    return demo_main(args.dir)


COMMANDS: dict[str, Command] = {
    "demo": Command(
        help="run the crash-and-resume example notebook headless: a kernel killed mid-tool, "
        "then resumed; prints the timeline",
        configure=_configure_demo,
        run=_run_demo,
    ),
    "inspect": Command(
        help="summarize a session file: runs, attempts, tool calls, usage, damage",
        configure=configure_inspect,
        run=run_inspect,
    ),
    "timeline": Command(
        help="the notebook's timeline as a table: runs, attempts, tool calls, usage",
        configure=configure_timeline,
        run=run_timeline,
    ),
    "usage": Command(
        help="tokens and cost per run, and the totals (unknown cost is never shown as 0)",
        configure=configure_usage,
        run=run_usage,
    ),
    "salvage": Command(
        help="copy the longest loadable prefix of a damaged session into the new file NEW "
        "(FILE is only read)",
        configure=configure_salvage,
        run=run_salvage,
    ),
    "fork": Command(
        help="copy the conversation up to and including run RUN into a new session file "
        "(FILE is only read), to try another way; prints the new file's path",
        configure=configure_fork,
        run=run_fork,
    ),
    "rewind": Command(
        help="show the plan of going back to just before run K (or --undo the last "
        "rewind): files restored, conflicts, what cannot be undone; --yes carries it out",
        configure=configure_rewind,
        run=run_rewind,
    ),
}
