"""The timeline model: runs → attempts → tool intents → usage, from a SessionState.

One pure pass over the facts builds the rows that the notebook's HTML display, the
plain-text repr and `tiny-agent-nb timeline` all render (`render` draws them), so they
never disagree.
"""

from __future__ import annotations

from ._build import PAGE_SIZE, ROWS_PER_RUN, build_timeline, compactions
from ._rows import (
    AttemptRow,
    KernelRow,
    ModelName,
    RunRow,
    Timeline,
    ToolRow,
    Totals,
    session_models,
)
from ._usage import RunUsage, cost_text, session_cost, usage_by_run, usage_lines
from ._words import (
    call_outcome,
    intent_label,
    outcome_note,
    replay_note,
    rewinds_text,
    run_text,
    runs_text,
)

__all__ = [
    "PAGE_SIZE",
    "ROWS_PER_RUN",
    "AttemptRow",
    "KernelRow",
    "ModelName",
    "RunRow",
    "RunUsage",
    "Timeline",
    "ToolRow",
    "Totals",
    "build_timeline",
    "call_outcome",
    "compactions",
    "cost_text",
    "intent_label",
    "outcome_note",
    "replay_note",
    "rewinds_text",
    "run_text",
    "runs_text",
    "session_cost",
    "session_models",
    "usage_by_run",
    "usage_lines",
]
