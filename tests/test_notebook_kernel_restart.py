"""A notebook's conversation across kernel restarts, in real IPython kernels: each kernel
records itself in the session, and the first request after a restart tells the model,
once, that the kernel restarted and what is gone (docs/spec.md §9). The model is the
loopback OpenAI server, which keeps every request body it was sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tiny_agent_nb.session import load_session

from helpers.kernel_helpers import Kernel, StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

SESSION = "analysis.agent.jsonl"
NOTICE = "[Kernel restarted]"


def execute(kernel: Kernel, code: str) -> str:
    run = kernel.execute(code)
    assert run.error is None and run.stderr == "", (run.error, run.stderr)
    return run.stdout


def notices(body: dict[str, Any]) -> list[str]:
    """The notices sent: a run's is the first paragraph of its prompt's user turn."""
    return [
        m["content"].partition("\n\n")[0]
        for m in body["messages"]
        if m["role"] == "user" and m["content"].startswith(NOTICE)
    ]


def test_the_first_request_after_a_restart_tells_the_model_once_what_is_gone(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    code = "import statistics\nsales = [3, 5, 8]\ndef mean(xs):\n    return sum(xs) / len(xs)"
    server.enqueue(
        tool_calls_reply(tool_call("call_py", "python", {"code": code})),
        text_reply("Loaded sales and defined mean."),
    )
    kernel = start_kernel(shared=True)
    execute(kernel, "%load_ext tiny_agent_nb")
    execute(kernel, "%%agent\nLoad the sales figures.")
    assert execute(kernel, "print(mean(sales))") == "5.333333333333333\n"
    first_pid = kernel.pid

    kernel.restart()  # as JupyterLab's "Restart Kernel": a new process, the same kernel id
    assert kernel.pid != first_pid
    execute(kernel, "%load_ext tiny_agent_nb")
    server.enqueue(text_reply("sales is gone: the kernel restarted."), text_reply("Still gone."))
    execute(kernel, "%%agent\nWhat is the mean of sales?")
    execute(kernel, "%%agent\nAnd now?")

    after_restart, next_run = (r.body for r in server.requests[-2:])
    print("request body after the restart:\n" + json.dumps(after_restart, indent=1))
    (notice,) = notices(after_restart)
    assert "the names earlier `python` calls defined (statistics, sales, mean)" in notice
    assert "the user's variables" in notice
    messages = after_restart["messages"]
    # Told first, then asked, in one user turn (never two user turns in a row)
    assert messages[-1] == {"role": "user", "content": f"{notice}\n\nWhat is the mean of sales?"}
    assert messages[-2]["role"] == "assistant"
    assert notices(next_run) == [notice]  # the same notice, where it was: once

    state = load_session(workspace / SESSION)
    first, second = state.kernels.values()
    assert (first.pid, second.pid) == (first_pid, kernel.pid)
    assert first.kernel_id is not None and first.kernel_id == second.kernel_id
    assert (first.notebook, second.notebook) == ("analysis.ipynb", "analysis.ipynb")
    assert first.notice_id is None and second.notice_id is not None
    assert state.entries[second.notice_id].entry.message.content == notice  # type: ignore[union-attr]

    # The timeline shows where the kernel changed, and what the model was told.
    shown = kernel.execute("%agent timeline").displays
    timeline = shown[-1]["text/plain"]
    assert "── ⟳ kernel 1 · analysis.ipynb" in timeline
    assert "── ⟳ kernel 2 · analysis.ipynb" in timeline
    assert "the model was told it restarted: [Kernel restarted]" in timeline


def test_restarts_with_no_run_between_them_give_one_notice(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(
        tool_calls_reply(tool_call("call_py", "python", {"code": "rows = 12"})),
        text_reply("Counted."),
    )
    kernel = start_kernel(shared=True)
    execute(kernel, "%load_ext tiny_agent_nb")
    execute(kernel, "%%agent\nCount the rows.")
    for _ in range(2):  # restarted twice, each time loading the extension and nothing more
        kernel.restart()
        execute(kernel, "%load_ext tiny_agent_nb")
    kernel.restart()
    execute(kernel, "%load_ext tiny_agent_nb")
    server.enqueue(text_reply("rows is gone."))
    execute(kernel, "%%agent\nHow many rows?")

    (notice,) = notices(server.requests[-1].body)
    assert "(rows)" in notice
    state = load_session(workspace / SESSION)
    assert len(state.kernels) == 4
    assert [k.notice_id is not None for k in state.kernels.values()] == [False] * 3 + [True]
