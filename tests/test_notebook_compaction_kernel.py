"""kill -9 of a real kernel (jupyter_client) while a compaction's summarization request
is held by the loopback server, then a new kernel: the recovery report, the session file
(the attempt failed as interrupted, no compaction entry, the context as before), the next
cell or `%agent resume`, and a second restart that changes no byte."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from test_notebook_kernel import SESSION, assert_clean, load, markdown

from tiny_agent_nb.agent import build_context
from tiny_agent_nb.provider import messages
from tiny_agent_nb.session import CompactionEntry, SessionState, load_session

from helpers.kernel_helpers import Kernel, StartKernel, start_kernel, workspace
from helpers.openai_server import (
    OpenAIServer,
    RecordedRequest,
    text_reply,
    tool_call,
    tool_calls_reply,
)
from helpers.polling import wait_until

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

BIG = "k" * 8000  # ~2000 tokens a read: two reads pass 0.8 x 4000


def _read(n: int) -> dict[str, Any]:
    return tool_calls_reply(tool_call(f"r{n}", "read_file", {"path": "big.txt"}))


def _compactions(state: SessionState) -> list[CompactionEntry]:
    return [e.entry for e in state.entries.values() if isinstance(e.entry, CompactionEntry)]


def _context(session: Path) -> list[messages.Message]:
    return build_context(load_session(session), None)


def _summarizing(server: OpenAIServer) -> list[RecordedRequest]:
    return [r for r in server.requests if "tools" not in r.body]


def _configured(start_kernel: StartKernel, config: str) -> Kernel:
    kernel = start_kernel(shared=True)
    load(kernel)
    assert_clean(kernel.execute(config))
    return kernel


def _kill_at_the_summary(kernel: Kernel, server: OpenAIServer, code: str) -> None:
    """Run `code` until its summarization request is at the server (whose reply is held),
    then SIGKILL the kernel."""
    run = kernel.send(code)
    wait_until(lambda: _summarizing(server), timeout=60, what="a summarization request")
    kernel.sigkill()
    kernel.collect(run, until_dead=True, timeout=10)
    assert not run.finished


def _failed_attempts(session: Path) -> list[tuple[str, str | None]]:
    state = load_session(session)
    return [
        (a.status, a.error.kind if a.error else None)
        for a in state.attempts.values()
        if a.status not in ("completed", "settled")
    ]


def test_kernel_killed_during_an_automatic_compaction_resumes_from_the_same_context(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    (workspace / "big.txt").write_text(BIG)
    session = workspace / SESSION
    hold = threading.Event()
    server.enqueue(_read(1), _read(2))
    server.enqueue_summaries(text_reply("SUMMARY never served", hold=hold))
    config = "%config TinyAgent.context_window = 4000\n%config TinyAgent.keep_tail_tokens = 1000"
    first = _configured(start_kernel, config)
    _kill_at_the_summary(first, server, "%%agent\nRead big.txt twice")
    context = _context(session)
    (killed,) = _summarizing(server)
    hold.set()
    state = load_session(session)
    assert _compactions(state) == [] and state.open_operation is not None

    second = start_kernel(shared=True)
    report = load(second)
    assert "1 run(s)" in report and "interrupted" in report, report
    assert "`%agent resume` continues the interrupted run." in report, report
    assert _compactions(load_session(session)) == [] and _context(session) == context
    assert _failed_attempts(session) == [("failed", "interrupted")]

    assert_clean(second.execute(config))
    server.enqueue(text_reply("Read it twice."))
    server.enqueue_summaries(text_reply("SUMMARY from the resume"))
    resumed = second.execute("%agent resume")
    assert_clean(resumed)
    assert markdown(resumed) == "Read it twice."
    again = _summarizing(server)[-1]
    assert again.body["messages"] == killed.body["messages"]  # the same context, summarized
    last = server.requests[-1].body["messages"]
    assert "SUMMARY from the resume" in last[2]["content"]
    state = load_session(session)
    assert [c.summary for c in _compactions(state)] == ["SUMMARY from the resume"]
    assert [(op.kind, op.status) for op in state.operations.values()] == [
        ("run", "interrupted"),
        ("resume", "completed"),
    ]
    second.shutdown()

    before = session.read_bytes()
    third = load(start_kernel(shared=True))
    assert "stopped during" not in third and "resume" not in third, third
    after = session.read_bytes()  # nothing but the third kernel's record
    assert after.startswith(before)
    assert [json.loads(after[len(before) :])["record"]["type"]] == ["kernelOpened"]


def test_kernel_killed_during_agent_compact_keeps_the_context_and_the_next_cell_works(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    (workspace / "big.txt").write_text(BIG)
    session = workspace / SESSION
    config = "%config TinyAgent.keep_tail_tokens = 10"
    first = _configured(start_kernel, config)
    server.enqueue(_read(1), text_reply("Read it."))
    assert markdown(first.execute("%%agent\nRead big.txt")) == "Read it."
    before_compaction = server.requests[-1].body["messages"]
    context = _context(session)
    hold = threading.Event()
    server.enqueue_summaries(text_reply("SUMMARY never served", hold=hold))
    _kill_at_the_summary(first, server, "%agent compact")
    hold.set()
    assert _compactions(load_session(session)) == [] and _context(session) == context

    second = start_kernel(shared=True)
    report = load(second)
    assert "interrupted" in report, report
    assert _compactions(load_session(session)) == [] and _context(session) == context
    assert _failed_attempts(session) == [("failed", "interrupted")]

    assert_clean(second.execute(config))
    unchanged = session.read_bytes()
    resumed = second.execute("%agent resume")  # a compaction is not a run to resume
    assert_clean(resumed)
    assert "nothing to resume" in resumed.stdout, resumed
    assert session.read_bytes() == unchanged
    server.enqueue(text_reply("Still here."))
    cell = second.execute("%%agent\nAnd now?")
    assert_clean(cell)
    assert markdown(cell) == "Still here."
    after = server.requests[-1].body["messages"]
    # the context the compaction would have replaced, then the answer, and one user turn:
    # the notice that the kernel restarted, then the new prompt
    assert after[: len(before_compaction)] == before_compaction
    assert [m["role"] for m in after[len(before_compaction) :]] == ["assistant", "user"]
    assert after[-1]["content"].startswith("[Kernel restarted]")
    assert after[-1]["content"].endswith("\n\nAnd now?")
    state = load_session(session)
    assert [(op.kind, op.status) for op in state.operations.values()] == [
        ("run", "completed"),
        ("compaction", "interrupted"),
        ("run", "completed"),
    ]
    second.shutdown()

    before = session.read_bytes()
    third = load(start_kernel(shared=True))
    assert "stopped during" not in third, third
    after = session.read_bytes()  # nothing but the third kernel's record
    assert after.startswith(before)
    assert [json.loads(after[len(before) :])["record"]["type"]] == ["kernelOpened"]
