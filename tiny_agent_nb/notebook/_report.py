"""What `%load_ext`, `%agent session` and `%agent new` say about the session they opened.

Tool names and arguments come from the file: each goes through `render.cell_text`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..agent import RecoveryReport, resumable_operation
from ..render import cell_text
from ..session import SessionState, ToolIntent
from ..timeline import intent_label, outcome_note, session_cost
from ..words import money, short_arguments
from ._paths import SessionLocation


@dataclass
class OpenReport:
    location: SessionLocation
    created: bool
    repaired_tail_bytes: int
    state: SessionState
    recovery: RecoveryReport | None
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        s = self.state
        where = cell_text(self.location.path.name)
        if self.created:
            head = f"tiny-agent-nb: new session {where} ({_source(self.location)})."
            return "\n".join([head, *(f"  {note}" for note in self.notes)])
        cost = money(*session_cost(s))
        lines = [
            f"tiny-agent-nb: session {where} ({_source(self.location)}) — "
            f"{len(s.operations)} run(s), cost {cost}."
        ]
        if self.repaired_tail_bytes:
            lines.append(
                f"  Dropped {self.repaired_tail_bytes} torn bytes: an append cut short when the "
                "kernel died (never committed)."
            )
        r = self.recovery
        if r is not None:
            lines.append(
                "  The previous kernel stopped during a run; it is now marked interrupted."
            )
            for intent in r.interrupted:
                still = (
                    " A process it started may still be running."
                    if intent in r.may_still_run
                    else ""
                )
                # As %agent status says it (timeline.call_outcome), of the call recovery
                # is marking interrupted: the state read still holds it pending.
                lines.append(
                    f"  ⚠ {call_text(s, intent)} interrupted — "
                    f"{outcome_note('interrupted')}.{still}"
                )
            for intent in r.replayed:
                lines.append(f"  ↻ {call_text(s, intent)} — {outcome_note('replayed')}")
            if r.failed_attempts:
                lines.append(
                    f"  {r.failed_attempts} model request(s) in flight were marked interrupted."
                )
        latest = resumable_operation(s)  # the planner's rule, not a copy
        if not isinstance(latest, str):
            lines.append(
                f"  `%agent resume` continues {_STOPPED.get(latest.status, _STOPPED[''])}."
            )
        lines.extend(f"  {note}" for note in self.notes)
        return "\n".join(lines)


# What `%agent resume` would continue, by how the latest run ended.
_STOPPED = {
    "": "the interrupted run",
    "budgetLimit": "the run its budget stopped, given a larger `--budget USD`",
    "stepLimit": "the run max_steps stopped, for more steps",
}


def call_text(state: SessionState, intent: ToolIntent) -> str:
    """A recorded tool call on one line, for a cell's text: `timeline.intent_label` (the
    tool's name and where it comes from unless it is built in: `time__get_current_time ·
    mcp:time`) and its arguments; both from the file: escaped."""
    return cell_text(f"{intent_label(state, intent)} {short_arguments(intent.arguments)}").rstrip()


def _source(location: SessionLocation) -> str:
    return {
        "explicit": "set explicitly",
        "JPY_SESSION_NAME": "beside this notebook",
        "__vsc_ipynb_file__": "beside this notebook (VS Code)",
        "default": "no notebook name known; in the current directory",
    }[location.source]
