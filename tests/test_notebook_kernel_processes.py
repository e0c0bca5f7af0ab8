"""A tool's processes die with their kernel: a real kernel SIGKILLed in the middle of a
`bash` or a `python` call (docs/spec.md §11), against the loopback OpenAI server.

What the command started (a background job, a `setsid` grandchild in a session of its
own) must be gone once the kernel is, and the next kernel's report says, of each call it
marks interrupted, whether what it started may still be running.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_agent_nb._guard import ADOPTS

from helpers.kernel_helpers import Kernel, StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

pytestmark = pytest.mark.skipif(not ADOPTS, reason="the guard adopts what leaves a group: Linux")

SESSION = "analysis.agent.jsonl"
GONE_WITHIN_S = 30.0  # generous: a loaded machine; the guard acts within milliseconds


def running(pid: int, started: str) -> bool:
    """Whether that very process (pid and start time) runs; a zombie has stopped (its
    reaper is not us)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] not in ("Z", "X") and fields[19] == started


def processes(pidfile: Path) -> list[tuple[int, str]]:
    """The pids a command wrote, each with its start time (pids are reused)."""
    found = []
    for pid in (int(word) for word in pidfile.read_text().split()):
        stat = Path(f"/proc/{pid}/stat").read_text()
        found.append((pid, stat.rsplit(")", 1)[1].split()[19]))
    return found


def kill_and_wait_for_the_processes(kernel: Kernel, pidfile: Path) -> None:
    wait_until(pidfile.exists, 60, what="the tool started its processes")
    started = processes(pidfile)
    assert all(running(*p) for p in started)
    kernel.sigkill()
    wait_until(
        lambda: not any(running(*p) for p in started),
        GONE_WITHIN_S,
        what=f"the processes of the killed kernel's tool call gone: {started}",
    )


def report(kernel: Kernel) -> str:
    run = kernel.execute("%load_ext tiny_agent_nb")
    assert run.error is None and run.stderr == "", run
    return run.stdout


def test_a_bash_command_and_all_it_started_die_with_a_sigkilled_kernel(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    command = (
        "sleep 300 & echo $! > pids.tmp; setsid sleep 300 & echo $! >> pids.tmp; "
        "echo $$ >> pids.tmp; mv pids.tmp pids; sleep 300"
    )
    server.enqueue(tool_calls_reply(tool_call("c1", "bash", {"command": command})))
    first = start_kernel()
    report(first)
    first.send("%%agent\nStart the slow jobs.")
    kill_and_wait_for_the_processes(first, workspace / "pids")

    said = report(start_kernel(shared=True))
    line = next(line for line in said.splitlines() if "⚠ bash" in line)
    assert line.endswith(" interrupted — it may have run; it was not run again.")  # no more


def test_what_python_code_started_dies_with_a_sigkilled_kernel(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    code = (
        "import subprocess, time\n"
        "children = [subprocess.Popen(['sleep', '300'])]\n"
        "children.append(subprocess.Popen(['setsid', 'sleep', '300']))\n"
        "open('pids.tmp', 'w').write(' '.join(str(c.pid) for c in children))\n"
        "__import__('os').rename('pids.tmp', 'pids')\n"
        "time.sleep(300)"
    )
    server.enqueue(
        tool_calls_reply(tool_call("c1", "python", {"code": code})),
        text_reply("never asked for"),
    )
    first = start_kernel()
    report(first)
    first.send("%%agent\nStart the slow jobs from Python.")
    kill_and_wait_for_the_processes(first, workspace / "pids")

    said = report(start_kernel(shared=True))
    line = next(line for line in said.splitlines() if "⚠ python" in line)
    assert line.endswith(
        " interrupted — it may have run; it was not run again. "
        "A process it started may still be running."
    )
    assert len(server.requests) == 1
