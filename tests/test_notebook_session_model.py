"""A session's model is never swapped silently, in real kernels: a new kernel whose
notebook has not configured the model yet does not let the offline demo model continue
a session a real model worked on. `%load_ext` names the model and how to configure it;
runs wait for it, or for `--demo`; another real model is said, not refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_agent_nb.provider import DEMO_LABEL, DEMO_PROVIDER
from tiny_agent_nb.session import load_session

from helpers.cli_helpers import cli
from helpers.kernel_helpers import (
    Kernel,
    StartKernel,
    start_kernel,
    stop_commands,
    stray_commands,
    workspace,
)
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

SESSION = "analysis.agent.jsonl"
SLEEPER = "echo ran >> marker.txt; sleep 60"


def execute(kernel: Kernel, code: str) -> str:
    run = kernel.execute(code)
    assert run.error is None and run.stderr == "", (run.error, run.stderr)
    return run.stdout


def _killed_mid_tool(start_kernel: StartKernel, workspace: Path, server: OpenAIServer) -> None:
    """A kernel with a real model (the loopback server) dies inside a bash call."""
    server.enqueue(tool_calls_reply(tool_call("call_sleep", "bash", {"command": SLEEPER})))
    first = start_kernel(shared=True)
    execute(first, "%load_ext tiny_agent_nb")
    run = first.send("%%agent\nRun the slow command.")
    marker = workspace / "marker.txt"
    wait_until(marker.exists, 30, what="the command started")
    first.sigkill()
    first.collect(run, until_dead=True, timeout=10)
    stop_commands(stray_commands(workspace))


def test_a_new_kernel_without_the_model_does_not_let_the_demo_continue_a_real_session(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    _killed_mid_tool(start_kernel, workspace, server)
    session = workspace / SESSION

    second = start_kernel(
        shared=True, base_url=None
    )  # the notebook's %env / %config has not run yet
    loaded = execute(second, "%load_ext tiny_agent_nb")
    assert "This session's runs used test/model (openai-compatible)" in loaded, loaded
    assert "`%config TinyAgent.base_url = '...'`" in loaded and "--demo" in loaded, loaded
    assert "OFFLINE DEMO MODEL" not in loaded  # not the banner of a demo session
    before = session.read_bytes()

    for cell in ("%agent resume", "%%agent\nWhat happened?", "%agent compact"):
        refused = execute(second, cell)
        assert refused.startswith("tiny-agent-nb: this session's runs used test/model"), refused
        assert "nothing was sent or recorded" in refused and "--demo" in refused, refused
        assert DEMO_LABEL not in refused
    assert session.read_bytes() == before  # the interrupted run can still be resumed

    # Once the model is configured, the run it left is resumed by that model.
    execute(second, f"%config TinyAgent.base_url = {server.base_url!r}")
    server.enqueue(text_reply("The command was interrupted; I will not run it again."))
    asked = len(server.requests)
    resumed = execute(second, "%agent resume")
    assert "This session's runs used" not in resumed, resumed
    assert len(server.requests) == asked + 1
    state = load_session(session)
    assert [(op.kind, op.status) for op in state.operations.values()] == [
        ("run", "interrupted"),
        ("resume", "completed"),
    ]
    assert {a.provider for a in state.attempts.values()} == {"openai-compatible"}


def test_the_user_may_ask_for_the_demo_model_and_another_model_is_said(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(text_reply("Hello from the real model."))
    first = start_kernel(shared=True)
    execute(first, "%load_ext tiny_agent_nb")
    execute(first, "%%agent\nHello")
    first.shutdown()

    second = start_kernel(shared=True, base_url=None)
    execute(second, "%load_ext tiny_agent_nb")
    asked = execute(second, "%%agent --demo\nHello again")
    assert f"[{DEMO_LABEL}]" in asked
    assert (
        "↔ This session's runs used test/model (openai-compatible); this one uses "
        "tiny-agent-nb/scripted-demo (offline-demo)."
    ) in asked
    state = load_session(workspace / SESSION)
    assert [a.provider for a in state.attempts.values()][-1] == DEMO_PROVIDER

    # A real model continuing what the demo did last: said, not refused.
    execute(second, f"%config TinyAgent.base_url = {server.base_url!r}")
    server.enqueue(text_reply("Real again."))
    again = execute(second, "%%agent\nAnd now?")
    assert "↔ This session's runs used tiny-agent-nb/scripted-demo (offline-demo)" in again
    assert (
        "model    openai-compatible / test/model (configured in this kernel, for the next run)\n"
        "         this session's runs used openai-compatible / test/model (latest of 2 models; "
        "also offline-demo / tiny-agent-nb/scripted-demo)\n"
    ) in execute(second, "%agent status")
    both = second.execute("%%agent --demo --model x/y\nHi")
    assert "--demo and --model name two models" in both.stdout + both.stderr + str(both.error)


def test_the_model_configured_after_load_ext_is_the_one_the_session_names(
    start_kernel: StartKernel,
    workspace: Path,
    server: OpenAIServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Configured the documented way (`%load_ext`, then `%config`), the session file is
    created while the demo model is the configured one: its header names the demo, but the
    status, the timeline and the CLI name the model that answered."""
    kernel = start_kernel(shared=True, base_url=None, model=None)
    execute(kernel, "%load_ext tiny_agent_nb")
    execute(
        kernel,
        f"%config TinyAgent.base_url = {server.base_url!r}\n%config TinyAgent.model = 'real/model'",
    )
    server.enqueue(text_reply("Hello from the real model."))
    execute(kernel, "%%agent\nHello")
    session = workspace / SESSION
    assert load_session(session).header.provider == DEMO_PROVIDER  # what it was created with
    real = "openai-compatible / real/model"

    status = execute(kernel, "%agent status")
    assert f"model    {real}\n" in status, status
    shown = kernel.execute("%agent timeline")
    assert shown.error is None, shown.error
    (bundle,) = shown.displays
    assert bundle["text/plain"].startswith(f"Agent timeline · {real}\n"), bundle["text/plain"]
    assert f"<b>Agent timeline</b> · {real}<br>" in bundle["text/html"]
    for text in (bundle["text/plain"], bundle["text/html"]):
        assert DEMO_PROVIDER not in text and "OFFLINE DEMO" not in text.upper()
    _, timeline, _ = cli(capsys, "timeline", str(session))
    assert timeline.startswith(f"Agent timeline · {real}\n"), timeline
    assert "OFFLINE DEMO" not in timeline
    _, inspected, _ = cli(capsys, "inspect", str(session))
    assert f"model        {real}\n" in inspected and DEMO_PROVIDER not in inspected, inspected
