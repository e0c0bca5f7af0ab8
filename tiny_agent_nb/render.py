"""Render a Timeline as HTML (the notebook display) or text (terminal, CLI).

Statuses are the file's words everywhere (`completed`, `interrupted`, `replayed`, ...),
in HTML also as CSS classes `tan-<status>` and a `data-status` attribute, for a
stylesheet and a browser test."""

from __future__ import annotations

import dataclasses
import html
from datetime import datetime, timedelta, timezone
from typing import Any

from .provider import DEMO_LABEL, DEMO_PROVIDER
from .safe_markdown import safe_text
from .timeline import (
    AttemptRow,
    KernelRow,
    RunRow,
    Timeline,
    ToolRow,
    Totals,
    replay_note,
)
from .words import BUILTIN, money, printable, shorten, tool_label, usage

# Colors are JupyterLab's theme variables, with fallbacks for viewers without them
# (GitHub, nbviewer, VS Code, an HTML export) that read on a light and a dark page alike:
# the page's text color, translucent grey tints. `.tan-tool pre` outranks JupyterLab's.
STYLE = """<style>
.tan-timeline{font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:13px;
 line-height:1.4;color:var(--jp-content-font-color1,inherit)}
.tan-timeline .tan-head{margin:2px 0 6px;color:var(--jp-ui-font-color1,inherit)}
.tan-timeline details{margin:2px 0 2px 0;border-left:3px solid
 var(--jp-border-color1,rgba(128,128,128,.5));padding-left:6px}
.tan-timeline summary{cursor:pointer}
.tan-timeline .tan-badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:11px;
 font-weight:600;color:#fff;background:#616161;margin-right:4px}
.tan-timeline .tan-completed,.tan-timeline .tan-settled{background:#2e7d32}
.tan-timeline .tan-replayed{background:#00796b}
.tan-timeline .tan-error,.tan-timeline .tan-failed{background:#c62828}
.tan-timeline .tan-interrupted{background:#ef6c00}
.tan-timeline .tan-aborted,.tan-timeline .tan-stepLimit,
.tan-timeline .tan-budgetLimit{background:#6d4c41}
.tan-timeline .tan-denied{background:#6a1b9a}
.tan-timeline .tan-pending,.tan-timeline .tan-open{background:#1565c0}
.tan-timeline .tan-tool{margin-left:18px}
.tan-timeline .tan-tool pre,.tan-timeline .tan-kernel pre{white-space:pre-wrap;max-height:16em;
 overflow:auto;padding:4px;margin:2px 0;color:var(--jp-content-font-color1,inherit);
 background:var(--jp-layout-color2,rgba(128,128,128,.15))}
.tan-timeline .tan-muted{color:var(--jp-ui-font-color2,inherit)}
.tan-timeline .tan-kernel{margin:6px 0 2px;padding:1px 6px;border-top:1px dashed
 var(--jp-border-color1,rgba(128,128,128,.5));color:var(--jp-ui-font-color2,inherit)}
.tan-timeline .tan-run[data-rewound]>summary{opacity:.6}
.tan-timeline .tan-rewind{margin-left:6px;font-size:11px;color:var(--jp-ui-font-color2,inherit)}
.tan-timeline .tan-scripted,.tan-timeline .tan-note{color:#3e2f00;background:#fff3cd;
 padding:2px 6px;border-radius:4px}
</style>"""

# Shown (by `superseded_rule`, in a later output) on a timeline drawn with a run open by a
# kernel that has since stopped: it can no longer be updated, and the run has ended.
SUPERSEDED = (
    "This timeline stopped updating while a run was open: the kernel that drew it has "
    "stopped. A later kernel has settled the session since; `%agent timeline` shows it now."
)


def superseded_rule(session_id: str, drawn_by: str) -> str:
    """A stylesheet that shows the superseded note on every timeline of `session_id`
    drawn with a run open by another kernel than `drawn_by` (styles apply to the whole
    page, so a later output can mark an earlier one; a saved notebook keeps both)."""
    session = html.escape(session_id, quote=True)
    return (
        f'<style>.tan-timeline[data-session="{session}"][data-open]'
        f':not([data-drawn-by="{html.escape(drawn_by, quote=True)}"]) .tan-superseded'
        "{display:block!important}</style>"
    )


def when(ms: int) -> str:
    """Epoch ms (the format bounds it to 1970-9999) as UTC time: a timedelta, so the last
    millisecond of 9999 is not rounded into year 10000 as a float division could be."""
    moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _badge(status: str) -> str:
    s = html.escape(status)
    return f'<span class="tan-badge tan-{s}" data-status="{s}">{s}</span>'


def _totals_line(t: Totals) -> str:
    return (
        f"{t.runs} run(s), {t.attempts} attempt(s), {t.tool_intents} tool call(s) · "
        f"{usage(t.input_tokens, t.output_tokens, t.cost, t.unpriced, t.usage_records)}"
    )


# The terminal has no banner colour to flag the scripted model: it shouts its name.
_demo_name, _, _demo_why = DEMO_LABEL.partition(" (")
_SHOUTED_DEMO_LABEL = f"{_demo_name.upper()} ({_demo_why}"


# JupyterLab typesets every `$...$` of an HTML output (MathJax): "$5 per day and we spent
# $3" showed in italics. Nothing in a timeline is maths, so all of it sits in the class
# MathJax skips, as pandas marks its tables.
NO_MATHS = '<div class="tex2jax_ignore mathjax_ignore">'


def _scripted(t: Timeline) -> bool:
    """The offline demo model answered (or, before any run, was configured)."""
    return DEMO_PROVIDER in t.models.providers


def timeline_html(t: Timeline, *, note: str | None = None, drawn_by: str | None = None) -> str:
    """`note`: how this view stands to the session (read-only, closed), shown first.
    `drawn_by`: the kernel drawing it; with no run open, it marks the timelines of its
    session drawn open by another kernel superseded."""
    e = html.escape
    t = _printable_timeline(t, keep_lines=True)  # what the file holds, hidden characters shown
    open_run = any(run.status == "open" for run in t.runs)
    marks = f' data-drawn-by="{e(drawn_by)}"' if drawn_by else ""
    marks += " data-open" if open_run else ""
    parts = [
        NO_MATHS,
        STYLE,
        f'<div class="tan-timeline" data-session="{e(t.session_id)}"{marks}>',
    ]
    if drawn_by and not open_run:
        parts.insert(1, superseded_rule(t.session_id, drawn_by))
    # Hidden three ways: a viewer that drops stylesheets (an untrusted notebook) may keep
    # the inline style or the attribute; only `superseded_rule` (!important) shows it.
    parts.append(
        f'<div class="tan-note tan-superseded" hidden style="display:none">{e(SUPERSEDED)}</div>'
    )
    if note:
        parts.append(f'<div class="tan-note">{e(note)}</div>')
    banner = f' <span class="tan-scripted">{e(DEMO_LABEL)}</span>' if _scripted(t) else ""
    parts.append(
        f'<div class="tan-head"><b>Agent timeline</b> · {e(t.models.described())}{banner}'
        f"<br>{e(_totals_line(t.totals))}"
        + (f" · page {t.page + 1} of {t.pages}" if t.pages > 1 else "")
        + (f" · {t.torn_tail_bytes} torn bytes ignored" if t.torn_tail_bytes else "")
        + "</div>"
    )
    if not t.runs:
        parts.append('<div class="tan-muted">No runs yet.</div>')
    for run in t.runs:
        if run.kernel is not None:
            parts.append(_kernel_html(run.kernel))
        parts.append(_run_html(run))
    if t.kernel is not None:
        parts.append(_kernel_html(t.kernel))
    parts.append("</div></div>")
    return "".join(parts)


def kernel_label(k: KernelRow) -> str:
    """`kernel 2 · analysis.ipynb · pid 4242 on laptop, started 2026-08-22 04:01:00 UTC`,
    in HTML and text alike (from the file: escaped by the caller)."""
    where = f" · {k.notebook}" if k.notebook else ""
    return f"kernel {k.number}{where} · pid {k.pid} on {k.host}, started {when(k.started_at)}"


KERNEL_TOLD = "the model was told it restarted"


def _kernel_html(k: KernelRow) -> str:
    e = html.escape
    label = f'<span class="tan-kernel-label">⟳ {e(kernel_label(k))}</span>'
    told = (
        f"<details><summary>{KERNEL_TOLD}</summary><pre>{e(k.notice)}</pre></details>"
        if k.notice is not None
        else ""
    )
    return f'<div class="tan-kernel" data-kernel="{k.number}">{label}{told}</div>'


def _run_html(run: RunRow) -> str:
    e = html.escape
    title = e(_title(run))
    rewound = f' data-rewound="{run.rewound_by}"' if run.rewound_by is not None else ""
    branch = f'<span class="tan-muted">{e(_branch(run))}</span>' if _branch(run) else ""
    out = [
        f'<details class="tan-run" data-run="{e(run.id)}" data-status="{e(run.status)}"'
        f"{rewound} open><summary>{_badge(run.status)} <b>{e(run.kind)}</b> {title}{branch} "
        f'<span class="tan-muted">· {_run_usage(run)} · '
        f"{e(when(run.started_at)) if run.started_at else ''}</span>{_rewind_hint(run)}</summary>"
    ]
    if run.detail:
        out.append(f'<div class="tan-muted">{e(run.detail)}</div>')
    if run.hidden_attempts:
        out.append(f'<div class="tan-muted">{run.hidden_attempts} earlier attempts not shown</div>')
    for attempt, tools in run.steps():
        if attempt is not None:
            out.append(_attempt_html(attempt))
        out.extend(_tool_html(tool) for tool in tools)
    out.append("</details>")
    return "".join(out)


# The runs a rewind can go back to before: a rewind's own row gets no hint (`%agent rewind
# --undo` undoes the last one). While its kernel lives, a Jupyter frontend shows each hint
# as a button (notebook/_rewind_control.py); a reopened notebook shows the command.
REWINDABLE = ("run", "resume", "replay", "compaction")


def _rewind_hint(run: RunRow) -> str:
    if run.kind not in REWINDABLE:
        return ""
    return f' <code class="tan-rewind" data-run="{run.number}">↶ %agent rewind {run.number}</code>'


def _attempt_html(a: AttemptRow) -> str:
    e = html.escape
    used = (
        f"{a.input_tokens} in / {a.output_tokens} out"
        if a.input_tokens is not None
        else "usage unknown"
    )
    latency = f" · {a.latency_ms} ms" if a.latency_ms is not None else ""
    error = f" · {e(shorten(a.error, 200))}" if a.error else ""
    error += f" · {e(a.compaction)}" if a.compaction else ""
    return (
        f'<div class="tan-attempt" data-status="{e(a.status)}">{_badge(a.status)} '
        f"attempt {a.step}.{a.attempt} {e(a.model)} · {used} · cost {money(a.cost)}"
        f"{latency}{error}</div>"
    )


def _tool_html(tool: ToolRow) -> str:
    """A tool call, under the attempt that asked for it: what happened on its line, its
    replay policy (what a crash would do, not what did) in the line's tooltip."""
    e = html.escape
    result = (
        f"<div>result:</div><pre>{e(tool.result)}</pre>"
        if tool.result is not None
        else '<div class="tan-muted">no result: the effect may have happened</div>'
    )
    source = f" · {e(tool.source)}" if tool.source != BUILTIN else ""
    note = f" — {e(tool.note)}" if tool.note else ""
    return (
        f'<details class="tan-tool" data-tool="{e(tool.name)}" data-source="{e(tool.source)}"'
        f' data-status="{e(tool.status)}" data-replay-policy="{e(tool.replay_policy)}">'
        f'<summary title="{e(replay_note(tool.replay_policy))}">{_badge(tool.status)} '
        f"<code>{e(tool.name)}</code>{source} {e(tool.short_arguments)}"
        f'<span class="tan-muted">{note}{e(_tool_usage(tool))}</span></summary>'
        f"<div>arguments:</div><pre>{e(tool.arguments)}</pre>{result}</details>"
    )


def _tool_usage(tool: ToolRow) -> str:
    """` · 40 in / 7 out · cost $0.0031` for a call whose tool reported its own usage (an
    MCP tool that calls a model)."""
    if tool.input_tokens is None:
        return ""
    return f" · {tool.input_tokens} in / {tool.output_tokens} out · cost {money(tool.cost)}"


def _title(run: RunRow) -> str:
    """A run's prompt; a resume or a replay has none, so it says which run it follows."""
    if run.prompt is not None:
        return run.prompt
    if run.kind == "compaction":
        return "summarizes the conversation (%agent compact)"
    if run.kind == "resume":
        return f"continues run {run.resumes}" if run.resumes else "continues an earlier run"
    if run.kind == "replay":  # docs/spec.md §12
        return f"↻ replays run {run.resumes} from the session (no model call)"
    if run.kind == "rewind":  # docs/spec.md §17
        return f"⟲ rewind to before run {run.resumes} (files and conversation)"
    return "(no prompt)"


def _branch(run: RunRow) -> str:
    """Where a run stands in the conversation's tree (docs/spec.md §17): off its path, or
    the first of a branch after a rewind."""
    words = ""
    if run.follows is not None:
        words += f" · ↳ continues from run {run.follows}" if run.follows else " · ↳ starts anew"
    if run.rewound_by is not None:
        words += f" · rewound by run {run.rewound_by}"
    return words


def _run_usage(run: RunRow) -> str:
    if run.kind == "rewind":  # restores files; it asks no model anything
        return "no model request"
    return usage(run.input_tokens, run.output_tokens, run.cost, run.unpriced, run.usage_records)


COLORS = {
    "completed": "32", "settled": "32", "replayed": "36", "error": "31", "failed": "31",
    "interrupted": "33", "aborted": "35", "stepLimit": "35", "budgetLimit": "35", "denied": "35",
    "pending": "34", "open": "34",
}  # fmt: skip


def cell_text(text: str, *, keep_lines: bool = False) -> str:
    """Untrusted text for a notebook cell's text output: `printable`, and `safe_text` (no
    `javascript://...` or `data:...` a Jupyter frontend would make a live link of)."""
    return safe_text(printable(text, keep_lines=keep_lines))


def _printable_timeline(value: Any, *, keep_lines: bool = False) -> Any:
    """Every string of a timeline through `printable`. Without `keep_lines` (the text view:
    one line per row) whitespace becomes a space first; with it (HTML) lines stay."""
    if isinstance(value, str):
        if not keep_lines and not value.isprintable():
            value = "".join(" " if c.isspace() else c for c in value)
        return printable(value, keep_lines=keep_lines)
    if isinstance(value, tuple):
        return tuple(_printable_timeline(v, keep_lines=keep_lines) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: _printable_timeline(getattr(value, f.name), keep_lines=keep_lines)
            for f in dataclasses.fields(value)
        }
        return dataclasses.replace(value, **changes)
    return value


def timeline_text(t: Timeline, *, color: bool = False, note: str | None = None) -> str:
    """The timeline for a terminal (the CLI, the demo, the notebook display's text/plain)."""
    t = _printable_timeline(t)

    def status(s: str) -> str:
        label = f"{s:<11}"
        return f"\x1b[{COLORS.get(s, '0')}m{label}\x1b[0m" if color else label

    lines = [
        f"Agent timeline · {t.models.described()}"
        + (f" · {_SHOUTED_DEMO_LABEL}" if _scripted(t) else ""),
        _totals_line(t.totals) + (f" · page {t.page + 1} of {t.pages}" if t.pages > 1 else ""),
    ]
    if note:
        lines.insert(0, f"({note})")
    if t.torn_tail_bytes:
        lines.append(f"{t.torn_tail_bytes} torn bytes after the last complete line (ignored)")
    for run in t.runs:
        lines.append("")
        if run.kernel is not None:
            lines.extend(_kernel_lines(run.kernel))
        lines.append(
            f"{status(run.status)} {run.kind:<6} {shorten(_title(run), 60)}{_branch(run)}"
            f"  [{_run_usage(run)}]"
        )
        if run.detail:
            lines.append(f"    {shorten(run.detail, 100)}")
        for a, tools in run.steps():
            if a is not None:
                latency = f" {a.latency_ms} ms" if a.latency_ms is not None else ""
                error = f" — {shorten(a.error, 70)}" if a.error else ""
                error += f" — {a.compaction}" if a.compaction else ""
                lines.append(f"  attempt {a.step}.{a.attempt} {status(a.status)}{latency}{error}")
            for tool in tools:  # under the attempt that asked for it
                label = tool_label(tool.name, tool.source)
                note = f" — {tool.note}" if tool.note else ""
                lines.append(
                    f"    tool  {status(tool.status)} {label} {tool.short_arguments}{note}"
                    f"{_tool_usage(tool)}"
                )
    if t.kernel is not None:
        lines.extend(["", *_kernel_lines(t.kernel)])
    return "\n".join(lines)


def _kernel_lines(k: KernelRow) -> list[str]:
    told = [f"    {KERNEL_TOLD}: {shorten(k.notice, 100)}"] if k.notice is not None else []
    return [f"── ⟳ {kernel_label(k)} ──", *told]
