"""`%agent fork [RUN]` in a real kernel: the notebook goes on in a fork of its conversation
through run RUN, which takes the session's name (so a new kernel opens it too); the whole
conversation is kept byte for byte as `analysis.agent.1.jsonl`, listed by `%agent status`;
no file in the workspace changes."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tiny_agent_nb.notebook._links import LINK_MIME
from tiny_agent_nb.session import load_session, read_header

from helpers.kernel_helpers import Execution, StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers


def _clean(run: Execution) -> Execution:
    assert run.error is None, run.error
    assert run.stderr == "", run.stderr
    return run


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_next_run_writes_the_fork_and_the_original_stays_byte_for_byte(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    kernel = start_kernel(shared=True)
    _clean(kernel.execute("%load_ext tiny_agent_nb"))
    for prompt, answer in (("First question", "one"), ("Second question", "two")):
        server.enqueue(text_reply(answer))
        _clean(kernel.execute(f"%%agent\n{prompt}"))
    (workspace / "data.txt").write_text("the user's\n")
    session = workspace / "analysis.agent.jsonl"
    original, digest = read_header(session).id, _digest(session)
    files = {p.name: _digest(p) for p in workspace.iterdir() if p.is_file()}

    refused = _clean(kernel.execute("%agent fork 9"))
    assert "has no run 9 (its runs are 1 to 2" in refused.stdout, refused.stdout
    assert {p.name: _digest(p) for p in workspace.iterdir() if p.is_file()} == files

    forked = _clean(kernel.execute("%agent fork 1"))
    assert forked.stdout.startswith(
        "Kept the whole conversation as analysis.agent.1.jsonl, unchanged. This notebook goes "
        "on in a fork of it through run 1; no file in the workspace was changed.\n"
        "tiny-agent-nb: session analysis.agent.jsonl (beside this notebook) — 1 run(s)"
    ), forked.stdout
    kept = workspace / "analysis.agent.1.jsonl"
    assert _digest(kept) == digest and read_header(kept).id == original
    fork = read_header(session).id
    assert fork != original
    # The link follows the fork: the notebook's newest link names it.
    assert [d[LINK_MIME] for d in forked.displays if LINK_MIME in d][-1]["session"] == fork
    # Nothing else in the workspace changed: only the session's file was kept aside.
    assert {p.name: _digest(p) for p in workspace.iterdir() if p.is_file() and p != kept} == {
        **{name: d for name, d in files.items() if name != session.name},
        session.name: _digest(session),
    }

    server.enqueue(text_reply("three"))
    _clean(kernel.execute("%%agent\nThird question"))
    sent = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] != "system"]
    assert sent[-1].endswith("Third question")
    assert "one" in sent and "two" not in sent
    assert not any("Second question" in str(m) for m in sent)
    assert _digest(kept) == digest  # the next run wrote the fork, not the original
    state = load_session(session)
    assert state.header.id == fork
    assert [op.status for op in state.operations.values()] == ["completed", "completed"]

    status = _clean(kernel.execute("%agent status")).stdout
    assert "forked   from analysis.agent.1.jsonl, through run 1\n" in status, status
    assert "kept     analysis.agent.1.jsonl (`%agent session NAME` opens one)\n" in status

    # Another kernel on the notebook (a restart, a reopened notebook) opens the fork too.
    _clean(kernel.execute("get_ipython().extension_manager.unload_extension('tiny_agent_nb')"))
    other = start_kernel(shared=True)
    loaded = _clean(other.execute("%load_ext tiny_agent_nb")).stdout
    assert loaded.startswith(
        "tiny-agent-nb: session analysis.agent.jsonl (beside this notebook) — 2 run(s)"
    )
    assert read_header(session).id == fork and _digest(kept) == digest
