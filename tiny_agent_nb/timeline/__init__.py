"""The timeline model: runs → attempts → tool intents → usage, from a SessionState.

One pure pass over the facts builds the rows that the notebook's HTML display,
the plain-text repr and `tiny-agent-nb timeline` all render, so they never disagree
(`render` draws them). The small words they are written in are `words`'.
"""

from __future__ import annotations

from ._build import PAGE_SIZE, ROWS_PER_RUN, build_timeline
from ._calls import (
    OUTCOME_WORDS,
    REPLAY_WORDS,
    called_name,
    intent_label,
    outcome_note,
    replay_note,
)
from ._compactions import CompactionRow, compaction_notes, compactions
from ._kernels import kernel_boundaries
from ._models import ModelName, SessionModels, session_models
from ._rows import AttemptRow, KernelRow, RunRow, Timeline, ToolRow, Totals
from ._usage import (
    RunUsage,
    cost_text,
    priced,
    session_cost,
    unreported_attempts,
    usage_by_run,
    usage_lines,
)

__all__ = [
    "OUTCOME_WORDS",
    "PAGE_SIZE",
    "REPLAY_WORDS",
    "ROWS_PER_RUN",
    "AttemptRow",
    "CompactionRow",
    "KernelRow",
    "ModelName",
    "RunRow",
    "RunUsage",
    "SessionModels",
    "Timeline",
    "ToolRow",
    "Totals",
    "build_timeline",
    "called_name",
    "compaction_notes",
    "compactions",
    "cost_text",
    "intent_label",
    "kernel_boundaries",
    "outcome_note",
    "priced",
    "replay_note",
    "session_cost",
    "session_models",
    "unreported_attempts",
    "usage_by_run",
    "usage_lines",
]
