"""`tiny-agent-nb`: look at session files outside Jupyter.

    tiny-agent-nb inspect FILE [--json]
    tiny-agent-nb timeline FILE [--page N | --all] [--json]
    tiny-agent-nb usage FILE [--json]
    tiny-agent-nb salvage FILE --out NEW [--json]
    tiny-agent-nb demo [--dir DIR]

No subcommand ever writes FILE: they read it through `load_session` (or, for `salvage`,
the same parse and apply steps), which takes no lock and never writes, so it is safe to
point them at a file a running kernel is appending to, or at a damaged file you want to
keep exactly as it is. `salvage` writes only the new file NEW; `demo` writes only in its
own directory. `--help` says both (WRITES, below), and lists the exit codes (EXIT_CODES).

Exit 141: the reader of the output went away before it was all written (`... | head`):
the command stops quietly, with the status a shell reports for a process killed by
SIGPIPE, as `cat` or `grep` would.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap

from .._version import __version__
from ._common import (
    EXIT_OUTPUT_CLOSED,
    Command,
    _Failed,
    _report_failure,
)
from ._demo import _configure_demo, run_demo
from ._inspect import _configure_inspect, run_inspect
from ._salvage import _configure_salvage, run_salvage
from ._timeline import _configure_timeline, run_timeline
from ._usage import _configure_usage, run_usage

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tiny-agent-nb` script and `python -m tiny_agent_nb`."""
    args = build_parser().parse_args(argv)
    command: Command = COMMANDS[args.command]
    try:
        try:
            code = command.run(args)
        except _Failed as failed:  # raised by any command: one way to report it
            code = _report_failure(failed, as_json=getattr(args, "json", False))
        # Flushed here, not at exit, so a reader that went away shows up below.
        sys.stdout.flush()
    except BrokenPipeError:
        return _output_closed()
    return code


def _output_closed() -> int:
    """The reader of stdout went away (`| head`): stop without a traceback.

    Not 0, because the output was cut short (a script with `set -o pipefail` should know);
    141 = 128 + SIGPIPE, what the shell reports for `cat` or `grep` in the same place.
    """
    try:
        # What is still buffered would fail again when the interpreter flushes it at exit
        # ("Exception ignored ... BrokenPipeError"): send it to /dev/null instead.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (tests capture it): nothing to flush
        pass
    return EXIT_OUTPUT_CLOSED


WRITES = (
    "Look at tiny-agent-nb session files (JSONL) outside Jupyter. No command modifies a "
    "session file: inspect, timeline and usage only read FILE; salvage reads FILE and "
    "writes only the new file NEW; demo writes only in its own directory (--dir, else a "
    "new temporary one)."
)
EXIT_CODES = """\
exit codes:
  0    success (salvage: something was salvaged into NEW)
  2    bad usage (a page that does not exist; salvage's NEW exists or is FILE)
  3    FILE is corrupt: a complete line is invalid, the error names it
       (salvage: even the header is invalid, nothing to salvage)
  4    FILE holds no session (empty, torn header, other data, not a regular
       file) or cannot be read (missing, unreadable)
  5    salvage could not write NEW (disk full, directory not writable);
       FILE is untouched and no partial NEW is left
  141  the output's reader went away (`... | head`)"""


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


COMMANDS: dict[str, Command] = {
    "demo": Command(
        help="run the crash-and-resume example notebook headless: a kernel killed mid-tool, "
        "then resumed; prints the timeline",
        configure=_configure_demo,
        run=run_demo,
    ),
    "inspect": Command(
        help="summarize a session file: runs, attempts, tool calls, usage, damage",
        configure=_configure_inspect,
        run=run_inspect,
    ),
    "timeline": Command(
        help="the notebook's timeline as a table: runs, attempts, tool calls, usage",
        configure=_configure_timeline,
        run=run_timeline,
    ),
    "usage": Command(
        help="tokens and cost per run, and the totals (unknown cost is never shown as 0)",
        configure=_configure_usage,
        run=run_usage,
    ),
    "salvage": Command(
        help="copy the longest loadable prefix of a damaged session into the new file NEW "
        "(FILE is only read)",
        configure=_configure_salvage,
        run=run_salvage,
    ),
}
