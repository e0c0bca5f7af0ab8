"""`tiny-agent-nb inspect FILE`: the summary of a session file."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

from ..render import KERNEL_TOLD
from ..session import SessionState, ToolIntent
from ..timeline import (
    call_outcome,
    cost_text,
    intent_label,
    rewinds_text,
    run_text,
    runs_text,
    session_models,
)
from ..words import printable
from ._common import EXIT_OK, _print_json, _read

OPEN_OPERATION = "open — the kernel stopped during this run"
PENDING_NEVER = "effect may have happened; not re-run"
# A pending safeRead intent is replayed on resume when its replayKey still matches the
# workspace (docs/spec.md §2.1); saying "not re-run" would be wrong for it.
PENDING_SAFE_READ = "read-only; replayed on resume if the workspace is unchanged"
ARGUMENTS_WIDTH = 100


def configure_inspect(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a session file (*.jsonl)")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"summary": ...} (the fixtures\' shape) instead of a report',
    )


def run_inspect(args: argparse.Namespace) -> int:
    path: str = args.file
    state = _read(path)
    if args.json:
        _print_json({"summary": state.summary()})
    else:
        print("\n".join(render_report(state)))
    return EXIT_OK


def render_report(state: SessionState) -> list[str]:
    """The human-readable report of `inspect`, one string per line."""
    return [
        *_header_lines(state),
        "",
        *_operation_lines(state),
        *_kernel_lines(state),
        _attempt_line(state),
        *_intent_lines(state),
        _usage_line(state),
        *_torn_tail_lines(state),
    ]


def _header_lines(state: SessionState) -> Iterator[str]:
    h = state.header
    yield f"session      {h.id} (format v{h.version})"
    yield f"file         {printable(state.path)}"
    yield f"created at   {_iso_time(h.createdAt)}"
    yield f"model        {printable(session_models(state).described())}"
    yield f"cwd          {printable(h.cwd)}"
    yield f"transactions {state.transaction_count} (lastSeq {state.last_seq})"


def _operation_lines(state: SessionState) -> Iterator[str]:
    operations = list(state.operations.values())
    yield f"runs         {runs_text(state)}"
    rewinds = rewinds_text(state)
    if rewinds is not None:
        yield f"rewinds      {rewinds}"
    for op in operations:
        if op.status == "open":
            yield f"  ! {op.id}  {op.kind:<6}  {OPEN_OPERATION}"
        else:
            yield f"    {op.id}  {printable(run_text(op))}"
    if state.open_operation is not None:
        yield "    (if a kernel still has this file open, the run may still be in progress)"


def _kernel_lines(state: SessionState) -> Iterator[str]:
    """The kernels that opened the session for writing (none for a file written before
    they were recorded), and whether the model was told of each change (docs/spec.md §9)."""
    kernels = list(state.kernels.values())
    if not kernels:
        return
    yield f"kernels      {len(kernels)}"
    for k in kernels:
        notebook = f"  {printable(k.notebook)}" if k.notebook else ""
        told = f"  ({KERNEL_TOLD})" if k.notice_id else ""
        yield (
            f"    {_iso_time(k.opened_at)}  pid {k.pid} on {printable(k.host)}, started "
            f"{_iso_time(k.started_at)}{notebook}{told}"
        )


def _attempt_line(state: SessionState) -> str:
    counts = Counter(a.status for a in state.attempts.values())
    by_status = ", ".join(f"{counts[s]} {s}" for s in ("settled", "failed", "pending") if counts[s])
    total = sum(counts.values())
    return f"attempts     {total}" + (f" ({by_status})" if by_status else "")


def _intent_lines(state: SessionState) -> Iterator[str]:
    intents = list(state.tool_intents.values())
    yield f"tool calls   {len(intents)}"
    # The timeline's label: the name the model called, and an MCP tool's source.
    labels = [printable(intent_label(state, i)) for i in intents]
    width = max(map(len, labels), default=0)
    for intent, label in zip(intents, labels, strict=True):
        yield from _intent(state, intent, label, width)


def _intent(state: SessionState, intent: ToolIntent, label: str, width: int) -> Iterator[str]:
    """What happened to a call (`call_outcome`, as `%agent status` says it), never its
    replay policy on a call no crash cut off; a pending call says what recovery will do."""
    name = f"{label:<{width}}"
    if intent.status != "pending":
        yield f"    {name}  {printable(call_outcome(state, intent))}"
        return
    why = PENDING_SAFE_READ if intent.replay_policy == "safeRead" else PENDING_NEVER
    yield f"  ! {name}  pending — {why}"
    # What may have run is what the user has to go and check.
    arguments = json.dumps(intent.arguments, ensure_ascii=False)
    if len(arguments) > ARGUMENTS_WIDTH:
        arguments = arguments[: ARGUMENTS_WIDTH - 1] + "…"
    yield f"      arguments {printable(arguments)}"


def _usage_line(state: SessionState) -> str:
    t = state.totals
    tokens = (
        f"{t.input_tokens} input, {t.output_tokens} output, {t.reasoning_tokens} reasoning, "
        f"{t.cached_input_tokens} cached input tokens"
    )
    return f"usage        {tokens}; cost {cost_text(state)}"


def _torn_tail_lines(state: SessionState) -> Iterator[str]:
    n = state.torn_tail_bytes
    if n > 0:
        noun = "byte" if n == 1 else "bytes"
        yield (
            f"torn tail    {n} {noun} after the last complete line (a write cut short by a "
            "crash); ignored, a writer will cut them on open"
        )


def _iso_time(epoch_ms: int) -> str:
    try:
        moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=epoch_ms)
    except OverflowError:
        return f"{epoch_ms} (epoch ms, out of range)"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
