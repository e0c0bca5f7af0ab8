"""What every subcommand shares: exit codes, reading a file, errors, formatting."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

from .._exceptions import TinyAgentError
from ..session import (
    NotASessionError,
    SessionCorruptError,
    SessionState,
    load_session,
)
from ..words import printable

EXIT_OK = 0
EXIT_USAGE = 2  # argparse's own code for bad arguments
EXIT_CORRUPT = 3
EXIT_NOT_A_SESSION = 4
EXIT_WRITE_FAILED = 5
EXIT_OUTPUT_CLOSED = 141  # 128 + SIGPIPE: stdout's reader went away (`| head`)


class _Failed(TinyAgentError):
    """A read failed in a way the user can meet; carries the exit code and messages."""

    def __init__(self, code: int, message: str, error: dict[str, Any]) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.error = error


def _report_failure(failed: _Failed, *, as_json: bool) -> int:
    """The message on stderr (and with --json, {"error": ...} on stdout); the exit code."""
    print(failed.message, file=sys.stderr)
    if as_json:
        _print_json({"error": failed.error})
    return failed.code


def _read(path: str) -> SessionState:
    """load_session, with its errors turned into what the user reads."""
    try:
        return load_session(path)
    except SessionCorruptError as exc:
        raise _Failed(EXIT_CORRUPT, _corrupt_message(exc), _corrupt_error(exc)) from exc
    except NotASessionError as exc:
        raise _not_a_session(exc) from exc
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def _not_a_session(exc: NotASessionError, also: str = "") -> _Failed:
    message = (
        f"error: {printable(exc.path)} is not a tiny-agent-nb session: {printable(exc.reason)}.\n"
        f"The file was not modified.{also}"
    )
    error = {"type": "NotASessionError", "path": exc.path, "reason": exc.reason}
    return _Failed(EXIT_NOT_A_SESSION, message, error)


def _unreadable(path: str, exc: OSError) -> _Failed:
    reason = exc.strerror or str(exc)
    message = f"error: cannot read {printable(path)}: {printable(reason)}."
    error = {"type": type(exc).__name__, "path": path, "reason": reason}
    return _Failed(EXIT_NOT_A_SESSION, message, error)


def _corrupt_message(exc: SessionCorruptError) -> str:
    where = f"line {exc.line} of {printable(exc.path)} is damaged"
    if exc.line == 1:
        intact = (
            "The header itself is invalid, so nothing in the file can be trusted or "
            "salvaged; `%agent new` starts a fresh session."
        )
    else:
        path = printable(shlex.quote(exc.path))
        intact = (
            f"The lines before line {exc.line} load cleanly, but a damaged complete line is "
            "never skipped: no kernel will open this file as it is. To go on with them:\n"
            f"  tiny-agent-nb salvage {path} --out NEW.jsonl\n"
            "then `%agent session NEW.jsonl` in the notebook."
        )
    return (
        f"error: {where}: {printable(exc.reason).rstrip('.')}.\nThe file was not modified. {intact}"
    )


def _corrupt_error(exc: SessionCorruptError) -> dict[str, Any]:
    return {"type": "SessionCorruptError", "path": exc.path, "line": exc.line, "reason": exc.reason}


def _print_json(value: dict[str, Any]) -> None:
    # json.dumps escapes only the C0 controls: a C1 CSI (U+009B), DEL, a bidi override or
    # a default-ignorable character from the file would reach the terminal raw. Each is
    # written as a \uXXXX escape (`printable`'s rule), which any JSON reader decodes to
    # the same string; other text stays readable.
    print(
        printable(
            json.dumps(value, indent=1, ensure_ascii=False), keep_lines=True, escape=_json_escape
        )
    )


def _json_escape(c: str) -> str:
    """`c` as JSON's \\u escape (a surrogate pair past the BMP, as JSON spells those)."""
    return json.dumps(c, ensure_ascii=True)[1:-1]
