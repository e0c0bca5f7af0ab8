"""MCP tools in real IPython kernels: a SIGKILL and a Ctrl-C during an MCP call.

The server is the SDK-written test server over stdio; its `mark_and_sleep` appends
'<pid> started' to a marker file, sleeps, then appends 'finished' (or 'cancelled' when
the call is cancelled). The model is the loopback server in this process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tiny_agent_nb.session import load_session

from helpers.kernel_helpers import EXECUTE_TIMEOUT, Execution, Kernel, kernel_env, workspace
from helpers.mcp_helpers import TEST_SERVER, pid_alive
from helpers.mcp_notebook_helpers import (
    kill,
    marker_lines,
    processes_mentioning,
    tool_results,
    transactions,
)
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until

NOTEBOOK = "analysis.ipynb"
SESSION = "analysis.agent.jsonl"
INTERRUPTED_LINE = "■ Interrupted. The abort is recorded; `%agent resume` continues the run.\n"

StartKernel = Callable[..., Kernel]

__all__ = ["workspace"]  # the fixture, from kernel_helpers


@pytest.fixture
def marker(workspace: Path) -> Path:
    return workspace / "marker.txt"


@pytest.fixture
def start_kernel(
    tmp_path: Path, workspace: Path, server: OpenAIServer, marker: Path
) -> Iterator[StartKernel]:
    """Kernels on the workspace's analysis.ipynb with the test server configured through
    TINY_AGENT_MCP_SERVERS; all shut down afterwards, and any server a marker names
    killed (a test that failed must not leave one behind)."""
    started: list[Kernel] = []

    def start(servers: dict[str, object] | None = None) -> Kernel:
        servers = servers or {"tiny": lingering_server(workspace)}
        env = kernel_env(
            tmp_path,
            base_url=server.base_url,
            notebook=workspace / NOTEBOOK,
            extra={"TINY_AGENT_MCP_SERVERS": json.dumps({"mcpServers": servers})},
        )
        kernel = Kernel.start(cwd=workspace, env=env)
        started.append(kernel)
        return kernel

    yield start
    for kernel in started:
        kernel.shutdown()
    for line in [line for m in workspace.glob("*.txt") for line in marker_lines(m)]:
        if line.endswith(" started"):
            kill(int(line.split()[0]))
    for pid in processes_mentioning(lingering(workspace)):
        kill(pid)


def lingering(workspace: Path) -> str:
    return str(workspace / "lingering")


def lingering_server(workspace: Path) -> dict[str, object]:
    """The test server, behind a shell that outlives it: when the server's stdin closes
    (its kernel died) the server exits, and the shell goes on with a process that would
    run for ten minutes, as `npx` leaves node behind. Its command lines name
    `lingering(workspace)`, so that the test can look for them."""
    python = sys.executable
    script = (
        f"{python} {TEST_SERVER} stdio; "
        f"exec {python} -c 'import time; time.sleep(600)' {lingering(workspace)}"
    )
    return {"command": "sh", "args": ["-c", script]}


def execute(kernel: Kernel, code: str) -> str:
    """Run a cell that must end cleanly: no error, no traceback, nothing on stderr."""
    return clean(kernel.execute(code, timeout=120))


def answer(run: Execution) -> str:
    """The final state of the streamed answer (the last markdown display)."""
    clean(run)
    texts = [d["text/markdown"] for d in run.displays if "text/markdown" in d]
    assert texts, run
    return texts[-1]


def clean(run: Execution) -> str:
    assert run.error is None, run.error
    assert run.stderr == "", run.stderr
    assert run.reply is not None and run.reply["status"] == "ok", run.reply
    assert "Traceback" not in run.stdout
    return run.stdout


def sleeping_call(marker: Path, call_id: str = "nap") -> dict[str, object]:
    return tool_call(call_id, "tiny__mark_and_sleep", {"path": str(marker), "seconds": 600})


def started_lines(marker: Path) -> list[str]:
    return [line for line in marker_lines(marker) if line.endswith(" started")]


def started_pid(marker: Path) -> int:
    wait_until(lambda: any(s.endswith(" started") for s in marker_lines(marker)), 60, what="call")
    return int(marker_lines(marker)[0].split()[0])


@pytest.mark.slow
def test_a_kernel_killed_during_an_mcp_call_leaves_no_server_and_is_never_rerun(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer, marker: Path
) -> None:
    session = workspace / SESSION
    server.enqueue(tool_calls_reply(sleeping_call(marker)), text_reply("I will not call it again."))
    first = start_kernel()
    execute(first, "%load_ext tiny_agent_nb")
    run = first.send("%%agent\nSleep on it.")
    pid = started_pid(marker)
    assert processes_mentioning(lingering(workspace))  # the shell, waiting on the server
    first.sigkill()
    first.collect(run, until_dead=True, timeout=10)

    # No orphan: the server and all it started die with its kernel, even one killed with
    # SIGKILL (the shell around it would otherwise run on for ten minutes).
    wait_until(lambda: not pid_alive(pid), 30, what=f"MCP server {pid} gone with its kernel")
    wait_until(lambda: not processes_mentioning(lingering(workspace)), 30, what="no orphan left")

    # What the dead kernel left: an open run, the intent of an MCP call without a result.
    state = load_session(session)
    assert state.open_operation is not None
    (intent,) = state.tool_intents.values()
    assert (intent.tool.name, intent.tool.version, intent.tool.source) == (
        "mark_and_sleep",
        "1.2.3",
        "mcp:tiny",
    )
    assert (intent.replay_policy, intent.status) == ("never", "pending")

    second = start_kernel()
    loaded = execute(second, "%load_ext tiny_agent_nb")
    assert "The previous kernel stopped during a run; it is now marked interrupted." in loaded
    (warning,) = [line for line in loaded.splitlines() if "⚠" in line]
    assert "tiny__mark_and_sleep · mcp:tiny" in warning
    assert "interrupted — it may have run; it was not run again." in warning
    # Loading started no server, and nothing ran the call again (the server may have
    # seen its call cancelled as it was stopped: it never finished).
    assert started_lines(marker) == [f"{pid} started"] and "finished" not in marker_lines(marker)
    assert not processes_mentioning(lingering(workspace))
    state = load_session(session)
    assert [i.status for i in state.tool_intents.values()] == ["interrupted"]
    assert [o.status for o in state.operations.values()] == ["interrupted"]

    status = execute(second, "%agent status")
    assert "mark_and_sleep" in status and "interrupted" in status

    resumed = second.execute("%agent resume", timeout=120)
    assert answer(resumed) == "I will not call it again."
    result = tool_results(server.requests[-1])["nap"]
    assert result.startswith("Interrupted: the process stopped after this tool started")
    assert started_lines(marker) == [f"{pid} started"]  # still exactly once
    state = load_session(session)
    assert [(o.kind, o.status) for o in state.operations.values()] == [
        ("run", "interrupted"),
        ("resume", "completed"),
    ]


@pytest.mark.slow
def test_ctrl_c_during_an_mcp_call_cancels_it_and_the_kernel_goes_on(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer, marker: Path
) -> None:
    session = workspace / SESSION
    server.enqueue(tool_calls_reply(sleeping_call(marker)))
    kernel = start_kernel()
    execute(kernel, "%load_ext tiny_agent_nb")
    run = kernel.send("%%agent\nSleep on it.")
    pid = started_pid(marker)
    kernel.interrupt()
    said, kept = clean(kernel.collect(run, timeout=60)).rstrip("\n").rsplit("\n", 1)
    assert f"{said}\n".endswith(INTERRUPTED_LINE)
    assert kept.startswith("↻ `%agent resume` keeps the run's options: runs changes without")

    # The protocol's cancellation reached the server: its tool saw the call cancelled.
    wait_until(lambda: "cancelled" in marker_lines(marker), 30, what="the call cancelled")
    assert marker_lines(marker) == [f"{pid} started", "cancelled"]
    last = [fact["record"] for fact in transactions(session)[-1] if fact["kind"] == "record"]
    assert last[0]["type"] == "abortRequested"
    assert last[-1]["type"] == "operationFinished" and last[-1]["outcome"] == "aborted"
    state = load_session(session)
    (intent,) = state.tool_intents.values()
    assert intent.status == "interrupted" and intent.tool.source == "mcp:tiny"

    # The kernel is usable, and so are the MCP tools.
    again = workspace / "again.txt"
    quick = tool_call("quick", "tiny__mark_and_sleep", {"path": str(again), "seconds": 0})
    server.enqueue(tool_calls_reply(quick), text_reply("Done quickly."))
    out = execute(kernel, "%%agent\nOnce more, quickly.")
    assert "✓ tiny__mark_and_sleep completed" in out
    assert tool_results(server.requests[-1])["quick"] == "slept"
    serving = int(marker_lines(again)[0].split()[0])

    # A kernel shut down the ordinary way stops its servers too (atexit).
    kernel.kc.stop_channels()
    # Time to exit on its own (SIGTERM comes at half of shutdown_wait_time, default 5 s,
    # and a loaded machine's kernel can take longer): atexit is what is tested.
    kernel.km.shutdown_wait_time = EXECUTE_TIMEOUT
    kernel.km.shutdown_kernel(now=False)
    wait_until(lambda: not pid_alive(serving), 30, what="the server stopped with its kernel")
    wait_until(lambda: not processes_mentioning(lingering(workspace)), 30, what="no orphan left")


@pytest.mark.slow
def test_ctrl_c_while_a_server_starts_stops_it_and_records_nothing(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    # A server that never answers initialize and ignores SIGTERM, tagged so that the test
    # can find it.
    tag = str(workspace / "stuck-server")
    stuck = {"command": sys.executable, "args": [str(TEST_SERVER), "stdio", "--say", tag, "--hang"]}
    kernel = start_kernel({"stuck": stuck})
    execute(kernel, "%load_ext tiny_agent_nb")
    before = (workspace / SESSION).read_bytes()
    run = kernel.send("%%agent\nHello?")
    wait_until(lambda: processes_mentioning(tag), 60, what="the server starting")
    kernel.interrupt()
    out = clean(kernel.collect(run, timeout=60))
    assert (
        out == "■ Interrupted while the MCP servers were starting; nothing was sent or recorded.\n"
    )
    assert (workspace / SESSION).read_bytes() == before
    assert server.requests == []
    wait_until(lambda: not processes_mentioning(tag), 30, what="the stuck server stopped")

    # The next cell tries again, and the run goes on without it after the start timeout.
    execute(kernel, "%config TinyAgent.mcp_start_timeout = 1.0")
    server.enqueue(text_reply("Here."))
    again = kernel.execute("%%agent\nHello?", timeout=60)
    assert answer(again) == "Here."
    said, advice, asked = again.stdout.splitlines()
    assert said.startswith("MCP server stuck") and said.endswith("Its tools are not offered.")
    assert advice == "`%agent mcp` tries the servers that did not start again."
    assert asked.startswith("Note: asking the server for the model's context window")
