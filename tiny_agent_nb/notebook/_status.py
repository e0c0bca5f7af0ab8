"""What `%agent status` says: the session as the runtime has it."""

from __future__ import annotations

from ..agent import compaction_status, resumable_operation
from ..render import cell_text
from ..timeline import ModelName, call_outcome, cost_text, run_text, runs_text, session_models
from ._report import call_text
from ._runtime import NotebookRuntime
from ._window_report import summary_line, window_line


def status_text(runtime: NotebookRuntime) -> str:
    """`%agent status`: the file, the model, the runs, what was cut off, cost, context."""
    out: list[str] = []
    state, read_only = runtime.read_state()
    open_op = state.open_operation
    latest = list(state.operations.values())[-1] if state.operations else None
    path = runtime.session_path()
    out.append(f"session  {cell_text(str(path))}" + (f" ({read_only})" if read_only else ""))
    # The model the next run asks, and the ones the runs used when they differ (the
    # header's is only what was configured when the file was created).
    used = session_models(state)
    configured = runtime.session_model.asked()
    asked = ModelName(configured.provider, configured.model)
    if used.used in ((), (asked,)):
        out.append(f"model    {cell_text(str(asked))}")
    else:
        out.append(
            f"model    {cell_text(str(asked))} (configured in this kernel, for the next run)"
        )
        out.append(f"         this session's runs used {cell_text(used.described())}")
    out.append(f"runs     {runs_text(state)}; facts {state.last_seq}")
    if open_op is not None:
        out.append(f"running  {open_op.id}")
    elif latest is not None:
        out.append(f"latest   {cell_text(run_text(latest))}")
    # The calls cut off in the latest run, or in the run `%agent resume` would continue
    # (a compaction may follow it); never those of a run since resumed: the resume
    # settled them, they are history.
    stopped = resumable_operation(state)
    runs = {latest.id if latest else "", "" if isinstance(stopped, str) else stopped.id}
    interrupted = [
        i
        for i in state.tool_intents.values()
        if i.status == "interrupted" and i.operation_id in runs
    ]
    for intent in interrupted[-5:]:  # as `tiny-agent-nb inspect` says each call
        out.append(f"  ⚠ {call_text(state, intent)} {cell_text(call_outcome(state, intent))}")
    if runtime.allowed_tools:  # "Allow <tool> for the rest of this session"
        allowed = cell_text(", ".join(sorted(runtime.allowed_tools)))
        out.append(f"allowed  {allowed}: every call, for the rest of this session (this kernel)")
    out.append(f"cost     {cost_text(state)}")  # as `tiny-agent-nb inspect` says it
    out.append(f"context  {window_line(runtime.provider, state)}")
    compacted = compaction_status(state)
    if compacted:
        out.append(f"         {compacted}")
        out.append(f"summary  {summary_line(state)}")
    return "\n".join(out)
