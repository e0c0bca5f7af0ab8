"""The agent: pure planner, context builder, and the loop that executes them.

Nothing here imports IPython; the notebook layer is glue over this package.
"""

from ._compaction import Compacted, compaction_line, compaction_status
from ._context import build_context
from ._loop import AgentLoop
from ._planner import INTERRUPTED_RESULT, plan_recovery, resumable_operation, resumable_run
from ._replay import Replayed, reruns_of
from ._restore import carry_out, interrupted_rewind
from ._rewind import RewindPlan, operation_numbered, plan_rewind, undo_target
from ._system_prompt import notebook_system_prompt
from ._turns import NOT_STARTED
from ._types import (
    DEFAULT_APPROVAL,
    DEFAULT_COMPACT_THRESHOLD,
    DEFAULT_KEEP_TAIL_TOKENS,
    DEFAULT_MAX_STEPS,
    AgentError,
    BudgetReached,
    ChatProvider,
    ContextFull,
    FixedFill,
    LoopConfig,
    LoopObserver,
    NoCleanCut,
    RecoveryReport,
    RunResult,
    StepsReached,
    StopReason,
)
from ._window import DEFAULT_CONTEXT_WINDOW, describe_origin

__all__ = [
    "DEFAULT_APPROVAL",
    "DEFAULT_COMPACT_THRESHOLD",
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_KEEP_TAIL_TOKENS",
    "DEFAULT_MAX_STEPS",
    "INTERRUPTED_RESULT",
    "NOT_STARTED",
    "AgentError",
    "AgentLoop",
    "BudgetReached",
    "ChatProvider",
    "Compacted",
    "ContextFull",
    "FixedFill",
    "LoopConfig",
    "LoopObserver",
    "NoCleanCut",
    "RecoveryReport",
    "Replayed",
    "RewindPlan",
    "RunResult",
    "StepsReached",
    "StopReason",
    "build_context",
    "carry_out",
    "compaction_line",
    "compaction_status",
    "describe_origin",
    "interrupted_rewind",
    "notebook_system_prompt",
    "operation_numbered",
    "plan_recovery",
    "plan_rewind",
    "reruns_of",
    "resumable_operation",
    "resumable_run",
    "undo_target",
]
