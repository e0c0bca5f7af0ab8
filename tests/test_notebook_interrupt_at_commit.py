"""Ctrl-C landing at a given commit of an operation, in an in-process IPython shell: the
interrupt is sent from inside the k-th commit (held there, as every commit holds SIGINT
on the main thread, and raised the moment it is done), so it lands exactly after that
write. Whatever the commit, the operation is not left open (the next cell is not
refused), and the cell says what the file says."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.session import Fact, Operation, RecordFact, load_session

from helpers.ipython_shell import run, shell
from helpers.openai_server import OpenAIServer, text_reply

__all__ = ["shell"]  # the fixture, from ipython_shell

SESSION = "analysis.agent.jsonl"
STARTS = ("runStarted", "resumeStarted", "compactionStarted")


def interrupt_at_commit(shell: InteractiveShell, k: int) -> None:
    """SIGINT from inside the k-th commit of the next operation (1: its start)."""
    store = shell.magics_manager.registry["AgentMagics"].runtime.store
    seen = 0

    def count(facts: list[Fact]) -> None:
        nonlocal seen
        types = [f.record.type for f in facts if isinstance(f, RecordFact)]
        if seen or any(t in STARTS for t in types):
            seen += 1
            if seen == k:
                os.kill(os.getpid(), signal.SIGINT)

    store.subscribe(count)


def operations(tmp_path: Path) -> list[Operation]:
    return list(load_session(tmp_path / SESSION).operations.values())


def test_ctrl_c_right_after_a_runs_start_records_the_abort_and_the_next_cell_runs(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    interrupt_at_commit(shell, 1)
    out = run(shell, "%%agent\nHello?", capsys)
    assert "■ Interrupted. The abort is recorded" in out
    assert [op.status for op in operations(tmp_path)] == ["aborted"]
    interrupt_at_commit(shell, 1)
    out = run(shell, "%agent resume", capsys)
    assert "■ Interrupted. The abort is recorded" in out
    assert [op.status for op in operations(tmp_path)] == ["aborted", "aborted"]
    assert server.requests == []
    server.enqueue(text_reply("Still here."))
    assert "Still here." in run(shell, "%%agent\nAre you there?", capsys)
    assert [op.status for op in operations(tmp_path)] == ["aborted", "aborted", "completed"]


def test_ctrl_c_while_a_runs_end_is_committed_leaves_the_run_as_it_ended(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The interrupt lands once the run's end is written: the run completed, and the cell
    shows its answer, not a stop the file does not hold."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(text_reply("All done."))
    interrupt_at_commit(shell, 4)  # runStarted, stepAttempt, the answer, operationFinished
    out = run(shell, "%%agent\nFinish.", capsys)
    assert [op.status for op in operations(tmp_path)] == ["completed"]
    assert "All done." in out and "Interrupted" not in out
