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

from tiny_agent_nb.session import CompactionEntry, Fact, Operation, RecordFact, load_session

from helpers.ipython_shell import run, shell
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

__all__ = ["shell"]  # the fixture, from ipython_shell
# Ctrl-C raises KeyboardInterrupt, as in a kernel, even in a run started in the background.
pytestmark = pytest.mark.usefixtures("sigint_raises")

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


def compacted(tmp_path: Path) -> int:
    entries = load_session(tmp_path / SESSION).entries.values()
    return sum(isinstance(e.entry, CompactionEntry) for e in entries)


def _read(n: int) -> dict[str, object]:
    return tool_calls_reply(tool_call(f"r{n}", "read_file", {"path": "big.txt"}))


# The commits of `%agent compact`: its start, the summary's request, the compaction entry,
# its end.
COMPACT_COMMITS = {"after its start": 1, "after the compaction entry": 3, "at its end": 4}


@pytest.mark.parametrize("where", COMPACT_COMMITS)
def test_ctrl_c_at_a_commit_of_agent_compact_is_said_as_the_file_says_it(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    """After its first write the compaction is aborted, nothing compacted; once its
    compaction entry is in (anywhere before its end) it is aborted with the compaction in
    effect, and the cell says it compacted, then stopped; once its end is in, it stays
    completed. The next `%agent compact` is never refused for an operation left open."""
    (tmp_path / "big.txt").write_text("y" * 8000)
    run(shell, "%load_ext tiny_agent_nb", capsys)
    run(shell, "%config TinyAgent.keep_tail_tokens = 10", capsys)
    server.enqueue(_read(1), _read(2), text_reply("Read it twice."))
    run(shell, "%%agent\nRead big.txt twice", capsys)
    server.enqueue_summaries(text_reply("SUMMARY: big.txt is 8000 y's"))
    interrupt_at_commit(shell, COMPACT_COMMITS[where])
    out = run(shell, "%agent compact", capsys)

    *_, compaction = operations(tmp_path)
    assert compaction.kind == "compaction"
    if where == "after its start":
        assert compaction.status == "aborted" and compacted(tmp_path) == 0
        assert "■ Interrupted. Nothing was compacted" in out
    elif where == "after the compaction entry":
        assert compaction.status == "aborted" and compacted(tmp_path) == 1
        assert "■ Interrupted once the compaction was committed (compacted 5 entries" in out
        assert "Nothing was compacted" not in out
    else:  # the end was committed: the interrupt changes nothing
        assert compaction.status == "completed" and compacted(tmp_path) == 1
        assert "⇊ compacted 5 entries" in out and "Interrupted" not in out
    server.enqueue_summaries(text_reply("SUMMARY again"))
    again = run(shell, "%agent compact", capsys)  # not refused for an operation left open
    assert "still open" not in again
    assert ("⇊ compacted" in again) == (where == "after its start")
    assert operations(tmp_path)[-1].status != "open"


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
