"""`tiny-agent-nb salvage FILE --out NEW`: the longest loadable prefix into a new file."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from ..session import (
    NotASessionError,
    SalvageResult,
    SessionCorruptError,
    SessionState,
    fsync_dir,
    load_session,
    read_session_file,
    salvage,
)
from ..words import printable
from ._common import (
    EXIT_CORRUPT,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WRITE_FAILED,
    _corrupt_error,
    _Failed,
    _not_a_session,
    _print_json,
    _unreadable,
)


def configure_salvage(parser: argparse.ArgumentParser) -> None:
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
    result = _salvage_file(source, out)
    state = _write_new(Path(out), result, _mode_of(source))
    if args.json:
        _print_json({"salvage": salvage_json(result, out, state)})
    else:
        print("\n".join(render_salvage(result, out, state)))
    return EXIT_OK


def _salvage_file(source: str, out: str) -> SalvageResult:
    _refuse_existing(source, out)
    try:
        # A FIFO or a device is refused without blocking (NotASessionError, below).
        return salvage(read_session_file(source), source)
    except OSError as exc:
        raise _unreadable(source, exc) from exc
    except NotASessionError as exc:
        raise _not_a_session(exc, f" Nothing was written to {printable(out)}.") from exc
    except SessionCorruptError as exc:  # the header (line 1) itself is invalid
        message = (
            f"error: line {exc.line} of {printable(exc.path)} is damaged: "
            f"{printable(exc.reason).rstrip('.')}.\n"
            "The header is invalid, so nothing in the file can be salvaged. "
            f"The file was not modified; nothing was written to {printable(out)}."
        )
        raise _Failed(EXIT_CORRUPT, message, _corrupt_error(exc)) from exc


def _refuse_existing(source: str, out: str) -> None:
    if out.rsplit(os.sep, 1)[-1] in ("", os.curdir, os.pardir):
        # `dir/`, `dir/.`, `dir/..`: `Path` drops the slash and a last `.`, and the copy
        # would become a file named like the directory.
        message = (
            f"error: refusing to write {printable(out)}: it names a directory, and NEW is "
            "the new file's path. Choose a new path for --out."
        )
        raise _Failed(EXIT_USAGE, message, {"type": "OutputIsDirectory", "path": out})
    if not os.path.lexists(out):
        return
    try:
        same = Path(source).samefile(out)
    except OSError:
        same = False
    if same:
        why = f"it is {printable(source)} itself: salvage never changes FILE in place"
        reason = "NEW is FILE"
    else:
        why = "it already exists, and salvage never overwrites a file"
        reason = "NEW exists"
    message = f"error: refusing to write {printable(out)}: {why}. Choose a new path for --out."
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
    # The copy is complete and verified already: a directory that cannot be synced
    # (opened or fsync-ed) costs only the name's survival of a power loss.
    with contextlib.suppress(OSError):
        fsync_dir(out.parent)
    return state


def _verify(tmp: str, out: Path, result: SalvageResult) -> SessionState:
    """load_session of the written copy: it must hold exactly the kept transactions."""
    try:
        state = load_session(tmp)
    except (NotASessionError, SessionCorruptError, OSError) as exc:  # a bug if it happens
        reason = str(exc)
    else:
        if state.transaction_count == result.transactions and state.torn_tail_bytes == 0:
            return state  # read from the temp file: the report uses its counts, not its path
        reason = f"it holds {state.transaction_count} transactions, not {result.transactions}"
    message = f"error: the salvaged copy does not load as it should ({printable(reason)}); nothing "
    message += f"was written to {printable(str(out))}."
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
    message = f"error: refusing to write {printable(str(out))}: it was created meanwhile."
    return _Failed(EXIT_USAGE, message, {"type": "OutputExists", "path": str(out)})


def _unwritable(out: Path, exc: OSError) -> _Failed:
    reason = exc.strerror or str(exc)
    message = (
        f"error: cannot write {printable(str(out))}: {printable(reason)}. Nothing was written."
    )
    return _Failed(EXIT_WRITE_FAILED, message, {"type": type(exc).__name__, "reason": reason})


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
    source = printable(result.path)
    lines = [
        f"salvaged     lines 1-{result.lines} of {source} into {printable(out)}: the header and "
        f"{result.transactions} transaction(s), {_bytes(result.kept_bytes)} (lastSeq "
        f"{state.last_seq})",
    ]
    if result.bad_line is None:
        lines.append("left behind  no complete line: every one was copied")
    else:
        bad = result.bad_line
        lines.append(
            f"left behind  line {bad} ({_bytes(result.bad_line_bytes)}): "
            f"{printable(result.reason or '')}"
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
