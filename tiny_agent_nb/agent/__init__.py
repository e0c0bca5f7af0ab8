"""The agent: pure planner, context projection, and the loop that executes them.

Nothing here imports IPython; the notebook layer is glue over this package.
"""

from ._compaction import DEFAULT_CONTEXT_WINDOW, Compacted, compaction_line, compaction_status
from ._context import NOT_STARTED, ContextProjection, wire_message
from ._loop import AgentLoop
from ._planner import (
    ABORTED_RESULT,
    INTERRUPTED_RESULT,
    Recovery,
    abort_transaction,
    can_replay,
    failure_transaction,
    plan_recovery,
    resumable_operation,
)
from ._tool_step import Approval
from ._types import (
    DEFAULT_SYSTEM_PROMPT,
    AgentError,
    ChatProvider,
    LoopConfig,
    LoopObserver,
    RecoveryReport,
    RunResult,
)

__all__ = [
    "ABORTED_RESULT",
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_SYSTEM_PROMPT",
    "INTERRUPTED_RESULT",
    "NOT_STARTED",
    "AgentError",
    "AgentLoop",
    "Approval",
    "ChatProvider",
    "Compacted",
    "ContextProjection",
    "LoopConfig",
    "LoopObserver",
    "Recovery",
    "RecoveryReport",
    "RunResult",
    "abort_transaction",
    "can_replay",
    "compaction_line",
    "compaction_status",
    "failure_transaction",
    "plan_recovery",
    "resumable_operation",
    "wire_message",
]
