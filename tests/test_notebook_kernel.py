"""The notebook surface in real IPython kernels (jupyter_client), against a scripted
OpenAI-compatible server on loopback.

Every kernel runs in a workspace under tmp_path with `JPY_SESSION_NAME` naming
`analysis.ipynb` there, so its session file is `analysis.agent.jsonl` beside it, as
under Jupyter. The kernel crash is a real SIGKILL of the kernel process in the middle
of a bash tool call.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tiny_agent_nb.notebook._loops import ASKING
from tiny_agent_nb.provider import messages
from tiny_agent_nb.safe_markdown import safe_markdown
from tiny_agent_nb.session import load_session

from helpers.kernel_helpers import (
    Execution,
    Kernel,
    StartKernel,
    start_kernel,
    stray_commands,
    workspace,
)
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until

SESSION = "analysis.agent.jsonl"
SLEEPER = "echo ran >> marker.txt; sleep 60"
INTERRUPTED_LINE = "■ Interrupted. The abort is recorded; `%agent resume` continues the run.\n"
# What a resume keeps of a run started with the configuration's options.
KEPT_LINE = (
    "↻ `%agent resume` keeps the run's options: runs changes without asking · tools: bash, "
    "delete_cell, edit_cell +10 more · no budget · 25 steps · model test/model\n"
)

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers


def load(kernel: Kernel) -> str:
    run = kernel.execute("%load_ext tiny_agent_nb")
    assert_clean(run)
    return run.stdout


def assert_clean(run: Execution) -> None:
    """No error, no traceback, nothing on stderr."""
    assert run.error is None, run.error
    assert run.stderr == "", run.stderr
    assert run.reply is not None and run.reply["status"] == "ok", run.reply
    assert "Traceback" not in run.stdout


def markdown(run: Execution) -> str:
    """The final state of the streamed answer (the last markdown display)."""
    texts = [d["text/markdown"] for d in run.displays if "text/markdown" in d]
    assert texts, run
    return texts[-1]


def transactions(session: Path) -> list[list[dict[str, object]]]:
    """The session file's lines as transactions (a lone fact is a transaction of one)."""
    out = []
    for line in session.read_text(encoding="utf-8").splitlines()[1:]:
        parsed = json.loads(line)
        out.append(parsed if isinstance(parsed, list) else [parsed])
    return out


def test_kill_mid_tool_then_recover_and_resume(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    answer = "The command was interrupted by the crash; I will not run it again."
    server.enqueue(
        tool_calls_reply(tool_call("call_sleep", "bash", {"command": SLEEPER})),
        text_reply(answer),
    )
    marker, session = workspace / "marker.txt", workspace / SESSION

    first = start_kernel(shared=True)
    assert load(first) == f"tiny-agent-nb: new session {SESSION} (beside this notebook).\n"
    run = first.send("%%agent\nRun the slow command.")
    wait_until(lambda: marker.exists() and marker.read_text() == "ran\n", 30, what="marker written")
    first.sigkill()
    first.collect(run, until_dead=True, timeout=10)
    assert not run.finished

    # The command died with its kernel: its guard (in a session of its own, as the
    # command's group is) ended it, and would have ended anything it started.
    wait_until(lambda: not stray_commands(workspace), 30, what="the command gone with its kernel")

    # What the dead kernel left: an open run and a tool intent without a result.
    state = load_session(session)
    assert state.open_operation is not None
    assert [(i.tool.name, i.status) for i in state.tool_intents.values()] == [("bash", "pending")]

    second = start_kernel(shared=True)
    assert load(second) == (
        f"tiny-agent-nb: session {SESSION} (beside this notebook) — 1 run(s), cost unknown.\n"
        "  The previous kernel stopped during a run; it is now marked interrupted.\n"
        f"  ⚠ bash command={json.dumps(SLEEPER)}, timeout=120.0 interrupted — "
        "it may have run; it was not run again.\n"
        "  `%agent resume` continues the interrupted run.\n" + KEPT_LINE
    )

    resumed = second.execute("%agent resume")
    assert_clean(resumed)
    assert resumed.stdout == f"Note: {ASKING}\n"  # a new kernel asks the server once
    assert markdown(resumed) == answer

    # The request after the crash is a conversation a strict provider accepts (200),
    # ending with the bash call, its interrupted result and the notice of the restart.
    assert len(server.requests) == 2
    request = server.requests[1]
    assert request.status == 200, request.problem
    call, result, notice = request.body["messages"][-3:]
    assert notice["role"] == "user" and notice["content"].startswith("[Kernel restarted]")
    assert call["role"] == "assistant"
    assert [c["id"] for c in call["tool_calls"]] == ["call_sleep"]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_sleep"
    assert result["content"].startswith("Interrupted: the process stopped after this tool started")

    assert marker.read_text() == "ran\n"  # the command ran exactly once
    state = load_session(session)
    assert [(op.kind, op.status) for op in state.operations.values()] == [
        ("run", "interrupted"),
        ("resume", "completed"),
    ]
    assert [i.status for i in state.tool_intents.values()] == ["interrupted"]


def test_second_kernel_on_the_same_notebook_is_refused(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    first = start_kernel(shared=True)
    load(first)
    session = workspace / SESSION
    before = session.read_bytes()

    second = start_kernel(shared=True)
    message = load(second)
    assert message == (
        f"tiny-agent-nb: {SESSION} is in use by process {first.pid}; this kernel will not "
        "write to it. Stop that kernel, or use `%agent session OTHER.jsonl`.\n"
    )

    # The refused kernel does not write, and sends nothing to the model.
    run = second.execute("%%agent\nAre you there?")
    assert_clean(run)
    assert run.stdout.count("\n") == 1 and run.stdout.startswith("tiny-agent-nb: ")
    assert server.requests == []
    assert session.read_bytes() == before

    # The first kernel is unaffected.
    server.enqueue(text_reply("Here."))
    run = first.execute("%%agent\nAre you there?")
    assert_clean(run)
    assert markdown(run) == "Here."


def test_interrupt_during_model_request_records_the_abort(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(text_reply("never delivered", hold=True))
    kernel = start_kernel(shared=True)
    load(kernel)

    run = kernel.send("%%agent\nTake your time.")
    server.wait_for_requests(1)  # the kernel is now waiting for the held reply
    kernel.interrupt()
    kernel.collect(run)
    assert_clean(run)
    assert run.stdout == f"Note: {ASKING}\n{INTERRUPTED_LINE}{KEPT_LINE}"
    server.release()

    # One transaction: abort requested, the attempt failed as aborted, the run aborted.
    last = transactions(workspace / SESSION)[-1]
    records = [fact["record"] for fact in last]
    assert [r["type"] for r in records] == ["abortRequested", "attemptFailed", "operationFinished"]
    assert records[1]["error"]["kind"] == "aborted"
    assert records[2]["outcome"] == "aborted"
    state = load_session(workspace / SESSION)
    (operation,) = state.operations.values()
    assert operation.status == "aborted"
    (attempt,) = state.attempts.values()
    assert attempt.error is not None and attempt.error.kind == "aborted"

    # ... and `%agent resume` continues it.
    server.enqueue(text_reply("Done after all."))
    resumed = kernel.execute("%agent resume")
    assert_clean(resumed)
    assert markdown(resumed) == "Done after all."
    assert server.requests[-1].status == 200
    assert [op.status for op in load_session(workspace / SESSION).operations.values()] == [
        "aborted",
        "completed",
    ]


def test_prompt_variables_come_from_the_user_namespace(
    start_kernel: StartKernel, server: OpenAIServer
) -> None:
    server.enqueue(text_reply("Three facts."))
    kernel = start_kernel(shared=True)
    load(kernel)
    assert_clean(kernel.execute("topic = 'durable notebooks'\ncount = 3"))

    run = kernel.execute(
        "%%agent\nWrite {count} facts about {topic}; keep {unknown} and {{braces}} as they are."
    )
    assert_clean(run)
    assert markdown(run) == "Three facts."
    (request,) = server.requests
    prompt = "Write 3 facts about durable notebooks; keep {unknown} and {braces} as they are."
    sent = request.body["messages"][-1]  # after the cell that set the variables (spec §6)
    assert sent["role"] == "user" and messages.prompt_of(sent["content"]) == prompt


def test_missing_api_key_for_default_openrouter_is_one_readable_message(
    start_kernel: StartKernel, workspace: Path
) -> None:
    # No TINY_AGENT_BASE_URL, no key: the default endpoint is OpenRouter, and with the
    # offline demo model turned off there is nothing to talk to. Should a request escape
    # anyway, the proxy variables send it to a closed loopback port, not outside.
    dead = "http://127.0.0.1:9"
    proxies = {name: dead for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")}
    extra = {**proxies, "NO_PROXY": "", "no_proxy": "", "TINY_AGENT_DEMO": "0"}
    kernel = start_kernel(shared=True, base_url=None, extra=extra)
    assert load(kernel) == f"tiny-agent-nb: new session {SESSION} (beside this notebook).\n"
    session = workspace / SESSION
    before = session.read_bytes()

    for code in ("%%agent\nHello?", "%agent resume"):
        run = kernel.execute(code)
        assert_clean(run)
        assert run.stdout.startswith(
            "tiny-agent-nb: no API key for OpenRouter. Set OPENROUTER_API_KEY (or "
            "TINY_AGENT_API_KEY) and restart the kernel"
        ), run.stdout
        assert run.stdout.count("\n") == 1
    assert session.read_bytes() == before  # nothing committed
    assert load_session(session).operations == {}

    status = kernel.execute("%agent status")
    assert_clean(status)
    assert "model    openrouter / test/model" in status.stdout


def test_a_hostile_answer_is_shown_as_text_in_every_update(
    start_kernel: StartKernel, server: OpenAIServer
) -> None:
    """The answer's markdown (each streamed update and the last) holds none of the
    model's tags or javascript: links, and its text/plain is the answer itself. The tool
    line holds no `javascript://` for JupyterLab to make a link of."""
    answer = (
        "Done. <img src=x onerror=alert(1)> [click](javascript:alert(1)) "
        "![x](https://attacker.example/p.png) `<b>code</b>`"
    )
    server.enqueue(
        tool_calls_reply(tool_call("call_1", "list_files", {"path": "javascript://%0Aalert(1)"})),
        text_reply(answer),
    )
    kernel = start_kernel(shared=True)
    load(kernel)
    run = kernel.execute("%%agent\nSay something.")
    assert_clean(run)
    bundles = [d for d in run.displays if "text/markdown" in d]
    assert bundles, run
    for bundle in bundles:
        assert set(bundle) == {"text/plain", "text/markdown"}
        assert "<img" not in bundle["text/markdown"], bundle
        assert "](javascript:" not in bundle["text/markdown"], bundle
        assert not re.search(r"(?<!\\)!\[", bundle["text/markdown"]), bundle  # no image
    assert bundles[-1]["text/plain"] == answer
    assert bundles[-1]["text/markdown"] == safe_markdown(answer)
    assert "javascript\ufeff://%0Aalert(1)" in run.stdout
    assert "javascript://" not in run.stdout
