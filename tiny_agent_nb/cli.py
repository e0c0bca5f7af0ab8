"""`tiny-agent-nb`: look at session files outside Jupyter.

    tiny-agent-nb inspect FILE [--json]
    tiny-agent-nb timeline FILE [--page N | --all] [--json]
    tiny-agent-nb usage FILE [--json]
    tiny-agent-nb salvage FILE --out NEW [--json]

No subcommand ever writes FILE: they read it through `load_session` (or, for `salvage`,
the same parse and apply steps), which takes no lock and never writes, so it is safe to
point them at a file a running kernel is appending to, or at a damaged file you want to
keep exactly as it is. Only `salvage` writes, and only the new file NEW.

Exit codes: 0 the file is a session (salvage: something was salvaged into NEW); 2 bad
usage (argparse; a page that does not exist; salvage's NEW already exists or is FILE);
3 the file is corrupt (a complete line is invalid: the error names the line; salvage:
the header itself is invalid, nothing to salvage); 4 the file holds no session (empty,
torn header, other data) or cannot be read (missing, unreadable); 5 salvage could not
write NEW.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import stat
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TextIO

from . import __version__
from .render import timeline_text
from .session import (
    NotASessionError,
    SessionCorruptError,
    SessionState,
    ToolIntent,
    UsageTotals,
    load_session,
    salvage,
)
from .session._salvage import SalvageResult
from .timeline import PAGE_SIZE, ROWS_PER_RUN, Timeline, build_timeline

EXIT_OK = 0
EXIT_USAGE = 2  # argparse's own code for bad arguments
EXIT_CORRUPT = 3
EXIT_NOT_A_SESSION = 4
EXIT_WRITE_FAILED = 5

# The provider of the offline demo model: its answers are scripted, not an LLM's, and the
# timeline says so, as the widget does. (provider.DEMO_PROVIDER; not imported, so that the
# CLI does not load the HTTP client.)
OFFLINE_DEMO_PROVIDER = "offline-demo"

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
        return _report_failure(failed, as_json=args.json)
    if args.json:
        _print_json({"summary": state.summary()})
    else:
        print("\n".join(render_report(state)))
    return EXIT_OK


def _report_failure(failed: _Failed, *, as_json: bool) -> int:
    """The message on stderr (and with --json, {"error": ...} on stdout); the exit code."""
    _print_err(failed.message)
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
        f"error: {_safe(exc.path)} is not a tiny-agent-nb session: {_safe(exc.reason)}.\n"
        f"The file was not modified.{also}"
    )
    error = {"type": "NotASessionError", "path": exc.path, "reason": exc.reason}
    return _Failed(EXIT_NOT_A_SESSION, message, error)


def _unreadable(path: str, exc: OSError) -> _Failed:
    reason = exc.strerror or str(exc)
    message = f"error: cannot read {_safe(path)}: {_safe(reason)}."
    error = {"type": type(exc).__name__, "path": path, "reason": reason}
    return _Failed(EXIT_NOT_A_SESSION, message, error)


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
    return f"usage        {tokens}; cost {_cost(t)}"


def _cost(t: UsageTotals) -> str:
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


# ---------------------------------------------------------------- timeline


def _page_number(text: str) -> int:
    try:
        page = int(text)
    except ValueError:
        page = 0
    if page < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a page number (1, 2, ...)")
    return page


def _configure_timeline(parser: argparse.ArgumentParser) -> None:
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
    try:
        state = _read(path)
    except _Failed as failed:
        return _report_failure(failed, as_json=args.json)
    if args.all:
        timeline = build_timeline(state, page=0, page_size=max(1, len(state.operations)))
    else:
        timeline = build_timeline(state, page=None if args.page is None else args.page - 1)
        if args.page is not None and args.page > timeline.pages:
            runs = len(state.operations)
            message = (
                f"error: there is no page {args.page}: {_safe(path)} holds {runs} run(s), "
                f"{timeline.pages} page(s) of up to {PAGE_SIZE}."
            )
            error = {"type": "PageOutOfRange", "page": args.page, "pages": timeline.pages}
            return _report_failure(_Failed(EXIT_USAGE, message, error), as_json=args.json)
    if args.json:
        _print_json({"timeline": timeline_json(timeline)})
        return EXIT_OK
    scripted = state.header.provider == OFFLINE_DEMO_PROVIDER
    print(timeline_text(_escaped(timeline), color=_use_color(sys.stdout), scripted=scripted))
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
        return {_camel(str(k)): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_camel_keys(v) for v in value]
    return value


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def _use_color(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except ValueError:  # closed
        return False


def _escaped(t: Timeline) -> Timeline:
    """The timeline with every string from the file made safe for a terminal.

    timeline_text prints prompts, tool names, arguments and errors as they are; a control
    character in them must not drive the terminal. Whitespace (a prompt's newlines)
    becomes a space, which timeline_text collapses anyway; other control characters are
    escaped as `_safe` does.
    """
    escaped: Timeline = _escape_strings(t)
    return escaped


def _escape_strings(value: Any) -> Any:
    if isinstance(value, str):
        if value.isprintable():
            return value
        return _safe("".join(" " if c.isspace() else c for c in value))
    if isinstance(value, tuple):
        return tuple(_escape_strings(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: _escape_strings(getattr(value, f.name)) for f in dataclasses.fields(value)
        }
        return dataclasses.replace(value, **changes)
    return value


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


# ---------------------------------------------------------------- usage


@dataclass(frozen=True)
class RunUsage:
    """The usage ledger of one run: every usage fact of its attempts and tool intents."""

    number: int  # 1-based, in file order
    operation_id: str
    kind: str
    status: str
    totals: UsageTotals
    unreported_attempts: int  # pending attempts with no usage: tokens and cost unknown


def usage_by_run(state: SessionState) -> list[RunUsage]:
    """Per-run sums of the usage ledger; together they are exactly `state.totals`."""
    totals = {op_id: UsageTotals() for op_id in state.operations}
    for target, fact in state.usage.items():
        attempt = state.attempts.get(target)
        owner = attempt.operation_id if attempt else state.tool_intents[target].operation_id
        totals[owner].add(fact)
    unreported: Counter[str] = Counter(
        a.operation_id
        for a in state.attempts.values()
        if a.status == "pending" and a.id not in state.usage
    )
    return [
        RunUsage(n, op.id, op.kind, op.status, totals[op.id], unreported[op.id])
        for n, op in enumerate(state.operations.values(), start=1)
    ]


def _configure_usage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a session file (*.jsonl)")
    parser.add_argument(
        "--json", action="store_true", help='print {"usage": ...} instead of a table'
    )


def run_usage(args: argparse.Namespace) -> int:
    path: str = args.file
    try:
        state = _read(path)
    except _Failed as failed:
        return _report_failure(failed, as_json=args.json)
    runs = usage_by_run(state)
    if args.json:
        _print_json({"usage": usage_json(state, runs)})
    else:
        print("\n".join(render_usage(state, runs)))
    return EXIT_OK


def _usage_record(t: UsageTotals) -> dict[str, Any]:
    return {**t.summary(), "usageRecords": t.priced + t.unpriced, "unpricedRecords": t.unpriced}


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
                **_usage_record(r.totals),
                "unreportedAttempts": r.unreported_attempts,
            }
            for r in runs
        ],
        "totals": _usage_record(state.totals),
    }


USAGE_COLUMNS = ("input", "output", "reasoning", "cached")


def render_usage(state: SessionState, runs: list[RunUsage]) -> list[str]:
    """The table of `usage`: one row per run, then the totals and what the marks mean."""
    rows = [
        [
            str(r.number),
            r.kind,
            r.status,
            *_token_cells(r.totals),
            _short_cost(r.totals),
            r.operation_id,
        ]
        for r in runs
    ]
    total = ["", "total", "", *_token_cells(state.totals), _short_cost(state.totals), ""]
    head = ["#", "kind", "status", *USAGE_COLUMNS, "cost", "operation"]
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
        f"usage of {_safe(state.path)}: {len(runs)} run(s), "
        f"{state.totals.priced + state.totals.unpriced} usage record(s)",
        "",
        line(head),
        *(line(row) for row in rows),
        line(total),
        "",
        f"total cost   {_cost(state.totals)}",
    ]
    lines.extend(_usage_notes(runs))
    return lines


def _token_cells(t: UsageTotals) -> list[str]:
    return [
        str(t.input_tokens),
        str(t.output_tokens),
        str(t.reasoning_tokens),
        str(t.cached_input_tokens),
    ]


def _short_cost(t: UsageTotals) -> str:
    cost = t.known_cost
    if cost is None:
        return "unknown"
    if t.unpriced:
        return f"≥{_usd(cost)}"
    return _usd(cost)


def _usage_notes(runs: list[RunUsage]) -> Iterator[str]:
    if any(r.totals.known_cost is None for r in runs):
        yield "unknown      the provider reported no cost for that run's usage (not counted as $0)"
    if any(r.totals.priced and r.totals.unpriced for r in runs):
        yield "≥            a lower bound: some usage records of that run report no cost"
    for r in runs:
        if r.unreported_attempts:
            yield (
                f"run {r.number}      {r.unreported_attempts} attempt(s) still pending, with no "
                "usage record (in flight, or cut off when the kernel stopped): their tokens "
                "and cost were never reported and are not counted"
            )


# ---------------------------------------------------------------- salvage


def _configure_salvage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file", metavar="FILE", help="a (damaged) session file; it is only read, never changed"
    )
    parser.add_argument(
        "--out",
        metavar="NEW",
        required=True,
        help="the new file to write the longest loadable prefix to; must not exist yet",
    )
    parser.add_argument(
        "--json", action="store_true", help='print {"salvage": ...} instead of a report'
    )


def run_salvage(args: argparse.Namespace) -> int:
    source: str = args.file
    out: str = args.out
    try:
        result = _salvage_file(source, out)
        state = _write_new(Path(out), result, _mode_of(source))
    except _Failed as failed:
        return _report_failure(failed, as_json=args.json)
    if args.json:
        _print_json({"salvage": salvage_json(result, out, state)})
    else:
        print("\n".join(render_salvage(result, out, state)))
    return EXIT_OK


def _salvage_file(source: str, out: str) -> SalvageResult:
    _refuse_existing(source, out)
    try:
        data = Path(source).read_bytes()
    except OSError as exc:
        raise _unreadable(source, exc) from exc
    try:
        return salvage(data, source)
    except NotASessionError as exc:
        raise _not_a_session(exc, f" Nothing was written to {_safe(out)}.") from exc
    except SessionCorruptError as exc:  # the header (line 1) itself is invalid
        message = (
            f"error: {_safe(exc.path)}, line {exc.line}: {_safe(exc.reason)}\n"
            "The header is invalid, so nothing in the file can be salvaged. "
            f"The file was not modified; nothing was written to {_safe(out)}."
        )
        raise _Failed(EXIT_CORRUPT, message, _corrupt_error(exc)) from exc


def _refuse_existing(source: str, out: str) -> None:
    if not os.path.lexists(out):
        return
    try:
        same = Path(source).samefile(out)
    except OSError:
        same = False
    if same:
        why = f"it is {_safe(source)} itself: salvage never changes FILE in place"
        reason = "NEW is FILE"
    else:
        why = "it already exists, and salvage never overwrites a file"
        reason = "NEW exists"
    message = f"error: refusing to write {_safe(out)}: {why}. Choose a new path for --out."
    raise _Failed(EXIT_USAGE, message, {"type": "OutputExists", "path": out, "reason": reason})


def _mode_of(source: str) -> int:
    """The copy gets the permission bits of the original (a temp file would be 0600)."""
    try:
        return stat.S_IMODE(Path(source).stat().st_mode)
    except OSError:
        return 0o644


def _write_new(out: Path, result: SalvageResult, mode: int) -> SessionState:
    """Write the salvaged prefix to a temp file beside `out`, check that it loads to what
    `salvage` kept, then publish it as `out`.

    Publishing is atomic and never clobbers: a hard link fails if `out` appeared in the
    meantime; where hard links are unsupported, os.replace after a last check. A reader
    never sees `out` half-written, and a failure leaves no `out` and no temp file.
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".salvage", dir=out.parent)
    except OSError as exc:
        raise _unwritable(out, exc) from exc
    try:
        try:
            with os.fdopen(fd, "wb") as file:
                os.fchmod(file.fileno(), mode)
                file.write(result.data)
                file.flush()
                os.fsync(file.fileno())
        except OSError as exc:
            raise _unwritable(out, exc) from exc
        state = _verify(tmp, out, result)
        _publish(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    _fsync_dir(out.parent)
    return state


def _verify(tmp: str, out: Path, result: SalvageResult) -> SessionState:
    """load_session of the written copy: it must hold exactly the kept transactions."""
    try:
        state = load_session(tmp)
    except (NotASessionError, SessionCorruptError, OSError) as exc:  # a bug if it happens
        reason = str(exc)
    else:
        if state.transaction_count == result.transactions and state.torn_tail_bytes == 0:
            state.path = str(out)
            return state
        reason = f"it holds {state.transaction_count} transactions, not {result.transactions}"
    message = f"error: the salvaged copy does not load as it should ({_safe(reason)}); nothing "
    message += f"was written to {_safe(str(out))}."
    raise _Failed(EXIT_WRITE_FAILED, message, {"type": "VerifyFailed", "reason": reason})


def _publish(tmp: str, out: Path) -> None:
    try:
        os.link(tmp, out)
    except FileExistsError as exc:
        raise _exists_now(out) from exc
    except OSError:  # no hard links here (some filesystems): check, then rename
        if os.path.lexists(out):
            raise _exists_now(out) from None
        try:
            Path(tmp).replace(out)
        except OSError as exc:
            raise _unwritable(out, exc) from exc


def _exists_now(out: Path) -> _Failed:
    message = f"error: refusing to write {_safe(str(out))}: it was created meanwhile."
    return _Failed(EXIT_USAGE, message, {"type": "OutputExists", "path": str(out)})


def _unwritable(out: Path, exc: OSError) -> _Failed:
    reason = exc.strerror or str(exc)
    message = f"error: cannot write {_safe(str(out))}: {_safe(reason)}. Nothing was written."
    return _Failed(EXIT_WRITE_FAILED, message, {"type": type(exc).__name__, "reason": reason})


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def salvage_json(result: SalvageResult, out: str, state: SessionState) -> dict[str, Any]:
    return {
        "source": result.path,
        "out": out,
        "kept": {
            "lines": result.lines,
            "bytes": result.kept_bytes,
            "transactions": result.transactions,
            "lastSeq": state.last_seq,
        },
        "leftBehind": {
            "bytes": result.left_behind_bytes,
            "badLine": result.bad_line,
            "reason": result.reason,
            "badLineBytes": result.bad_line_bytes,
            "linesAfter": result.lines_after,
            "bytesAfter": result.bytes_after,
            "tornTailBytes": result.torn_tail_bytes,
        },
    }


def render_salvage(result: SalvageResult, out: str, state: SessionState) -> list[str]:
    """The report of `salvage`: what NEW holds, and exactly what stayed behind in FILE."""
    source = _safe(result.path)
    lines = [
        f"salvaged     lines 1-{result.lines} of {source} into {_safe(out)}: the header and "
        f"{result.transactions} transaction(s), {_bytes(result.kept_bytes)} (lastSeq "
        f"{state.last_seq})",
    ]
    if result.bad_line is None:
        lines.append("left behind  no complete line: every one was copied")
    else:
        bad = result.bad_line
        lines.append(
            f"left behind  line {bad} ({_bytes(result.bad_line_bytes)}): "
            f"{_safe(result.reason or '')}"
        )
        if result.lines_after:
            last = bad + result.lines_after
            lines.append(
                f"             {result.lines_after} complete line(s) after it, lines "
                f"{bad + 1}-{last} ({_bytes(result.bytes_after)}), not copied: a damaged line "
                "is never skipped, so nothing after it can be applied"
            )
        else:
            lines.append(f"             no complete line after line {bad}")
        lines.append(
            "warning      the copy knows nothing of what the lines left behind record: tool "
            "calls logged there may have run; check before resuming from the copy"
        )
    if result.torn_tail_bytes:
        lines.append(
            f"             a torn tail of {_bytes(result.torn_tail_bytes)} after the last "
            "complete line (a write cut short by a crash), not copied"
        )
    if state.open_operation is not None:
        lines.append(
            f"open run     {state.open_operation.id} is open in the copy: a kernel opening the "
            "copy recovers it as after a crash (a tool intent without a result is not re-run "
            "unless it is a read-only safeRead)"
        )
    lines.append(f"{source} was not modified; what was left behind is still there.")
    return lines


def _bytes(n: int) -> str:
    return f"{n} byte" if n == 1 else f"{n} bytes"


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


def _configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the notebook runs and its session file is kept (default: a new temp dir)",
    )


def run_demo(args: argparse.Namespace) -> int:
    # Imported here: the other subcommands must not need a Jupyter kernel client.
    from .demo import main as demo_main  # noqa: PLC0415

    return demo_main(args.dir)


COMMANDS: dict[str, Command] = {
    "demo": Command(
        help="run notebooks/crash-and-resume.ipynb headless: a kernel killed mid-tool, "
        "then resumed; prints the timeline",
        configure=_configure_demo,
        run=run_demo,
    ),
    "inspect": Command(
        help="summarize a session file: operations, tool intents, usage, damage",
        configure=_configure_inspect,
        run=run_inspect,
    ),
    "timeline": Command(
        help="the notebook's timeline as a table: runs, attempts, tool intents, usage",
        configure=_configure_timeline,
        run=run_timeline,
    ),
    "usage": Command(
        help="tokens and cost per run, and the totals (unknown cost is never shown as 0)",
        configure=_configure_usage,
        run=run_usage,
    ),
    "salvage": Command(
        help="copy the longest loadable prefix of a damaged session into a new file",
        configure=_configure_salvage,
        run=run_salvage,
    ),
}
