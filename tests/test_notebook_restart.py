"""A kernel restarted or shut down from Jupyter's menu while a `%%agent` cell runs: the
run's abort says so, not "interrupted by the user".

jupyter_client's `restart_kernel` and `shutdown_kernel` (what JupyterLab's Kernel menu
asks jupyter_server for) first interrupt the kernel (SIGINT), then send
`shutdown_request` on the control channel: the same two steps here, on real kernels.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tiny_agent_nb.session import SessionState, load_session

from helpers.kernel_helpers import EXECUTE_TIMEOUT, StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply
from helpers.polling import wait_until

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

SESSION = "analysis.agent.jsonl"


def _run_cut_short(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path, stop: str
) -> SessionState:
    """A run waiting for its answer, ended by `stop`; the session as the kernel left it."""
    kernel = start_kernel()
    assert kernel.execute("%load_ext tiny_agent_nb").error is None
    answer = threading.Event()
    server.enqueue(text_reply("Too late.", hold=answer))
    running = kernel.send("%%agent\nTake your time.")
    try:
        server.wait_for_requests(1, timeout=60)
        # The menu's Restart and Shut Down: interrupt, shutdown_request, then (after
        # shutdown_wait_time) a signal; each returns once the old kernel process is gone.
        # What is tested is what the kernel records when it gets to answer the request:
        # past half of the default 5 s, SIGTERM ends it first on a loaded machine, its
        # abort unrecorded. It exits as soon as its cell ends, so the wait costs nothing.
        kernel.km.shutdown_wait_time = EXECUTE_TIMEOUT
        if stop == "restart":
            kernel.km.restart_kernel(now=False)
        elif stop == "shutdown":
            kernel.km.shutdown_kernel(now=False)
        else:
            kernel.interrupt()
            kernel.collect(running)
    finally:
        answer.set()
    path = workspace / SESSION
    return wait_until(
        lambda: (s := load_session(path)).open_operation is None and s,
        what="the run settled in the session file",
    )


@pytest.mark.parametrize(
    ("stop", "reason"),
    [
        ("restart", "stopped by a kernel restart"),
        ("shutdown", "stopped by a kernel shutdown"),
        ("interrupt", "interrupted by the user (KeyboardInterrupt)"),
    ],
)
def test_a_run_cut_short_by_the_kernel_menu_says_what_stopped_it(
    start_kernel: StartKernel,
    server: OpenAIServer,
    workspace: Path,
    stop: str,
    reason: str,
) -> None:
    state = _run_cut_short(start_kernel, server, workspace, stop)
    (op,) = state.operations.values()
    assert (op.status, op.detail, op.aborted_reason) == ("aborted", reason, reason)
    (attempt,) = state.attempts.values()
    assert attempt.error is not None and attempt.error.kind == "aborted"
