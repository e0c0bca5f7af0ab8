"""`tiny-agent-nb fork FILE [RUN]`: a new session holding FILE's conversation up to and
including run RUN (docs/spec.md §10), for trying another way; FILE is only read."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..session import ForkRefusedError, fork_session, next_archive_path
from ..words import printable
from ._common import EXIT_OK, EXIT_USAGE, EXIT_WRITE_FAILED, _Failed, _read


def configure_fork(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a session file; it is only read")
    parser.add_argument(
        "run",
        metavar="RUN",
        type=int,
        nargs="?",
        help="the run the fork ends with, numbered as the timeline numbers them (default: "
        "the whole file, refused while a run is open)",
    )
    parser.add_argument(
        "--out",
        metavar="NEW",
        type=Path,
        help="the new file (default: the first free FILE's name with .<n> before .jsonl, "
        "as `%%agent new` keeps a conversation); never overwritten",
    )


def run_fork(args: argparse.Namespace) -> int:
    source: str = args.file
    _read(source)  # a file that is no session, or damaged, said as every command says it
    out: Path = args.out or next_archive_path(Path(source))
    try:
        fork_session(source, out, through=args.run, refuse_open=True)
    except ForkRefusedError as exc:
        raise _Failed(EXIT_USAGE, f"error: {printable(str(exc))}", _error(exc, out)) from exc
    except FileExistsError as exc:
        message = f"error: refusing to write {printable(str(out))}: it exists. Nothing was written."
        raise _Failed(EXIT_USAGE, message, _error(exc, out)) from exc
    except OSError as exc:
        reason = exc.strerror or str(exc)
        message = (
            f"error: cannot write {printable(str(out))}: {printable(reason)}. Nothing was written."
        )
        raise _Failed(EXIT_WRITE_FAILED, message, _error(exc, out)) from exc
    print(printable(str(out)))
    return EXIT_OK


def _error(exc: Exception, out: Path) -> dict[str, str]:
    return {"type": type(exc).__name__, "path": str(out), "reason": str(exc)}
