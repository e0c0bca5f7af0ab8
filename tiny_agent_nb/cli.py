"""`tiny-agent-nb`: look at session files outside Jupyter.

    tiny-agent-nb inspect FILE [--json]

Every subcommand only *reads*: it goes through `load_session`, which takes no lock and
never writes, so it is safe to point at a file a running kernel is appending to, or at a
damaged file you want to keep exactly as it is.

Exit codes: 0 the file is a session; 2 bad usage (argparse); 3 the file is corrupt
(a complete line is invalid: the error names the line); 4 the file holds no session
(empty, torn header, other data) or cannot be read (missing, unreadable).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from . import __version__
from .session import (
    NotASessionError,
    SessionCorruptError,
    SessionState,
    ToolIntent,
    load_session,
)

EXIT_OK = 0
EXIT_USAGE = 2  # argparse's own code for bad arguments
EXIT_CORRUPT = 3
EXIT_NOT_A_SESSION = 4

OPEN_OPERATION = "open — the kernel stopped during this run"
PENDING_NEVER = "effect may have happened; not re-run"
# A pending safeRead intent is replayed on resume when its replayKey still matches the
# workspace (DESIGN §6); saying "not re-run" would be wrong for it.
PENDING_SAFE_READ = "read-only; replayed on resume if the workspace is unchanged"
ARGUMENTS_WIDTH = 100


# ---------------------------------------------------------------- subcommand registry


@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, how it adds its arguments, and what it runs."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


class _Failed(Exception):
    """A read failed in a way the user can meet; carries the exit code and messages."""

    def __init__(self, code: int, message: str, error: dict[str, Any]) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.error = error


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tiny-agent-nb` script and `python -m tiny_agent_nb`."""
    args = build_parser().parse_args(argv)
    command: Command = COMMANDS[args.command]
    return command.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tiny-agent-nb",
        description="Read tiny-agent-nb session files (JSONL) without modifying them.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        command.configure(sub)
    return parser


# ---------------------------------------------------------------- inspect


def _configure_inspect(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a session file (*.jsonl)")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"summary": ...} (the fixtures\' shape) instead of a report',
    )


def run_inspect(args: argparse.Namespace) -> int:
    path: str = args.file
    try:
        state = _read(path)
    except _Failed as failed:
        _print_err(failed.message)
        if args.json:
            _print_json({"error": failed.error})
        return failed.code
    if args.json:
        _print_json({"summary": state.summary()})
    else:
        print("\n".join(render_report(state)))
    return EXIT_OK


def _read(path: str) -> SessionState:
    """load_session, with its errors turned into what the user reads."""
    try:
        return load_session(path)
    except SessionCorruptError as exc:
        raise _Failed(EXIT_CORRUPT, _corrupt_message(exc), _corrupt_error(exc)) from exc
    except NotASessionError as exc:
        message = (
            f"error: {_safe(exc.path)} is not a tiny-agent-nb session: {_safe(exc.reason)}.\n"
            "The file was not modified."
        )
        error = {"type": "NotASessionError", "path": exc.path, "reason": exc.reason}
        raise _Failed(EXIT_NOT_A_SESSION, message, error) from exc
    except OSError as exc:
        reason = exc.strerror or str(exc)
        message = f"error: cannot read {_safe(path)}: {_safe(reason)}."
        error = {"type": type(exc).__name__, "path": path, "reason": reason}
        raise _Failed(EXIT_NOT_A_SESSION, message, error) from exc


def _corrupt_message(exc: SessionCorruptError) -> str:
    where = f"{_safe(exc.path)}, line {exc.line}"
    if exc.line == 1:
        intact = "The header itself is invalid, so nothing in the file can be trusted."
    else:
        intact = (
            f"The lines before line {exc.line} load cleanly, but a damaged complete line is "
            f"never skipped: no kernel will open this file until line {exc.line} is repaired."
        )
    return (
        f"error: {where}: {_safe(exc.reason)}\n"
        f"The file was not modified. {intact}\nKeep a copy before changing anything."
    )


def _corrupt_error(exc: SessionCorruptError) -> dict[str, Any]:
    return {"type": "SessionCorruptError", "path": exc.path, "line": exc.line, "reason": exc.reason}


# ---------------------------------------------------------------- the report


def render_report(state: SessionState) -> list[str]:
    """The human-readable report of `inspect`, one string per line."""
    return [
        *_header_lines(state),
        "",
        *_operation_lines(state),
        _attempt_line(state),
        *_intent_lines(state),
        _usage_line(state),
        *_torn_tail_lines(state),
    ]


def _header_lines(state: SessionState) -> Iterator[str]:
    h = state.header
    yield f"session      {h.id} (format v{h.version})"
    yield f"file         {_safe(state.path)}"
    yield f"created at   {_iso_time(h.createdAt)}"
    yield f"provider     {_safe(h.provider)} / {_safe(h.model)}"
    yield f"cwd          {_safe(h.cwd)}"
    yield f"transactions {state.transaction_count} (lastSeq {state.last_seq})"


def _operation_lines(state: SessionState) -> Iterator[str]:
    operations = list(state.operations.values())
    yield f"operations   {len(operations)}"
    for op in operations:
        if op.status == "open":
            yield f"  ! {op.id}  {op.kind:<6}  {OPEN_OPERATION}"
        else:
            note = op.detail or op.aborted_reason
            suffix = f" ({_safe(note)})" if note else ""
            yield f"    {op.id}  {op.kind:<6}  {op.status}{suffix}"
    if state.open_operation is not None:
        yield "    (if a kernel still has this file open, the run may still be in progress)"


def _attempt_line(state: SessionState) -> str:
    counts = Counter(a.status for a in state.attempts.values())
    by_status = ", ".join(f"{counts[s]} {s}" for s in ("settled", "failed", "pending") if counts[s])
    total = sum(counts.values())
    return f"attempts     {total}" + (f" ({by_status})" if by_status else "")


def _intent_lines(state: SessionState) -> Iterator[str]:
    intents = list(state.tool_intents.values())
    yield f"tool intents {len(intents)}"
    width = max((len(_safe(i.tool.name)) for i in intents), default=0)
    for intent in intents:
        yield from _intent(intent, width)


def _intent(intent: ToolIntent, width: int) -> Iterator[str]:
    name = f"{_safe(intent.tool.name):<{width}}  {intent.replay_policy:<8}"
    if intent.status != "pending":
        yield f"    {name}  {intent.status}"
        return
    why = PENDING_SAFE_READ if intent.replay_policy == "safeRead" else PENDING_NEVER
    yield f"  ! {name}  pending — {why}"
    # What may have run is what the user has to go and check.
    arguments = json.dumps(intent.arguments, ensure_ascii=False)
    if len(arguments) > ARGUMENTS_WIDTH:
        arguments = arguments[: ARGUMENTS_WIDTH - 1] + "…"
    yield f"      arguments {_safe(arguments)}"


def _usage_line(state: SessionState) -> str:
    t = state.totals
    tokens = (
        f"{t.input_tokens} input, {t.output_tokens} output, {t.reasoning_tokens} reasoning, "
        f"{t.cached_input_tokens} cached input tokens"
    )
    return f"usage        {tokens}; cost {_cost(state)}"


def _cost(state: SessionState) -> str:
    t = state.totals
    cost = t.known_cost
    if cost is None:
        return "unknown (the provider reported no cost)"
    if t.priced and t.unpriced:
        records = t.priced + t.unpriced
        return f"at least {_usd(cost)} ({t.unpriced} of {records} usage records have no cost)"
    return _usd(cost)


def _torn_tail_lines(state: SessionState) -> Iterator[str]:
    n = state.torn_tail_bytes
    if n > 0:
        noun = "byte" if n == 1 else "bytes"
        yield (
            f"torn tail    {n} {noun} after the last complete line (a write cut short by a "
            "crash); ignored, a writer will cut them on open"
        )


# ---------------------------------------------------------------- formatting


def _usd(cost: float) -> str:
    """Sub-cent costs are common, so keep up to 6 decimals but at least 2."""
    text = f"{cost:.6f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"${whole}.{frac:0<2}"


def _iso_time(epoch_ms: int) -> str:
    try:
        moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=epoch_ms)
    except OverflowError:
        return f"{epoch_ms} (epoch ms, out of range)"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _safe(text: str) -> str:
    """Strings come from the file: escape control characters so they can't drive the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _print_json(value: dict[str, Any]) -> None:
    print(json.dumps(value, indent=1, ensure_ascii=False))


def _print_err(message: str) -> None:
    print(message, file=sys.stderr)


COMMANDS: dict[str, Command] = {
    "inspect": Command(
        help="summarize a session file: operations, tool intents, usage, damage",
        configure=_configure_inspect,
        run=run_inspect,
    ),
}
