"""A replayed run (docs/spec.md §12): a cell's completed run shown again from the session,
with no model request, its `python` calls run again in this kernel so that the names
they defined exist again; nothing else runs again (`bash`, writes and MCP calls changed
the world). Each call is an effect like any other: intent, then result, in order, up to
the first that fails. Under `approve="ask"` one question shows all the code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..redaction import REDACTED
from ..session import SessionStore, ToolIntent, ToolOutcome, new_id
from ..session import facts as f
from ._kernel_notice import PYTHON_TOOL
from ._operation import OperationGuard
from ._tool_step import ToolStep
from ._types import LoopObserver, RunResult


@dataclass(frozen=True)
class Replayed:
    """A replayed run's end, and each call it ran again (or denied) with its outcome."""

    result: RunResult
    reruns: tuple[tuple[ToolIntent, ToolOutcome], ...]


def reruns_of(calls: Sequence[ToolIntent]) -> list[ToolIntent]:
    """The calls a replay runs again: built-in `python` calls that completed, whose code
    was kept as it ran (one with a secret redacted would run other code)."""
    return [
        i
        for i in calls
        if i.tool.name == PYTHON_TOOL
        and i.tool.source == "builtin"
        and i.status == "completed"
        and isinstance(code := i.arguments.get("code"), str)
        and REDACTED not in code
    ]


def replay_run(
    store: SessionStore,
    operations: OperationGuard,
    tool_step: ToolStep,
    observer: LoopObserver,
    *,
    run_id: str,
    calls: Sequence[ToolIntent],
    cell_id: str | None,
) -> Replayed:
    """Replay the run `run_id` (a `run` operation) whose chain made `calls`, in order."""
    operation_id = new_id()
    rerun = reruns_of(calls)
    done: list[tuple[ToolIntent, ToolOutcome]] = []
    # Asked before the replay starts, once for all the code: a no leaves each call denied.
    code = "\n\n".join(str(i.arguments["code"]) for i in rerun)
    allowed = not rerun or tool_step.approved(PYTHON_TOOL, {"code": code})

    def body(operation_id: str) -> RunResult:
        for intent in rerun:
            outcome = tool_step.rerun(operation_id, intent, observer, allowed=allowed)
            done.append((intent, outcome))
            if outcome == "error":
                detail = f"the python call {intent.tool_call_id} failed when run again"
                return operations.end(operation_id, "failed", detail=detail)
        return operations.end(operation_id, "completed")

    start = f.OperationStarted(
        operationId=operation_id,
        operationKind="replay",
        inputEntryId=None,
        replaysOperationId=run_id,
        cellId=cell_id,
    )
    return Replayed(operations.run([f.NewFact(start)], operation_id, body), tuple(done))
