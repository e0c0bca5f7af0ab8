"""`tiny-agent-nb`: look at session files outside Jupyter.

    tiny-agent-nb inspect FILE [--json]
    tiny-agent-nb timeline FILE [--page N | --all] [--json]
    tiny-agent-nb usage FILE [--json]
    tiny-agent-nb salvage FILE --out NEW [--json]
    tiny-agent-nb fork FILE [RUN] [--out NEW]
    tiny-agent-nb demo [--dir DIR]
    tiny-agent-nb rewind FILE K|--undo [--yes] [--force]

No subcommand but `rewind --yes` writes FILE: the others read it through `load_session`
(or, for `salvage`, the same parse and apply steps), which takes no lock and never
writes, so it is safe to point them at a file a running kernel is appending to, or at a
damaged file you want to keep exactly as it is; `salvage` and `fork` write only their new
file. `--help` says so and lists the exit codes (`_parser`).
"""

from __future__ import annotations

import os
import sys

from . import _common, _parser
from ._common import _Failed, _report_failure

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tiny-agent-nb` script and `python -m tiny_agent_nb`."""
    args = _parser.build_parser().parse_args(argv)
    try:
        try:
            code = _parser.COMMANDS[args.command].run(args)
        except _Failed as failed:  # raised by any command: one way to report it
            code = _report_failure(failed, as_json=getattr(args, "json", False))
        # Flushed here, not at exit, so a reader that went away shows up below.
        sys.stdout.flush()
    except BrokenPipeError:
        return _output_closed()
    return code


def _output_closed() -> int:
    """The reader of stdout went away (`| head`): stop quietly with 141 (128 + SIGPIPE),
    as `cat` or `grep` would; not 0, since the output was cut short (`set -o pipefail`)."""
    try:
        # What is still buffered would fail again when the interpreter flushes it at exit
        # ("Exception ignored ... BrokenPipeError"): send it to /dev/null instead.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (tests capture it): nothing to flush
        pass
    return _common.EXIT_OUTPUT_CLOSED
