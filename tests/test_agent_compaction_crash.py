"""kill -9 during a compaction (a real child process, tests/crash/agent_child.py forked
from the forkserver), then recover and resume in a new process; a second restart
changes nothing."""

from __future__ import annotations

from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

from test_agent_crash import TIMEOUT_S, Bench

from tiny_agent_nb.agent import build_context
from tiny_agent_nb.provider import messages
from tiny_agent_nb.session import CompactionEntry, SessionState, load_session

from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

BIG = "z" * 8000  # ~2000 tokens a read: two reads pass 0.8 x 4000
# the tool schemas (~1,300 tokens) and two reads of big.txt pass 0.8 of the window
SMALL = ("--context-window", "5000", "--keep-tail-tokens", "1000")


def _read(n: int, **options: Any) -> dict[str, Any]:
    return tool_calls_reply(tool_call(f"r{n}", "read_file", {"path": "big.txt"}), **options)


def _bench(forkserver: ForkServerContext, server: OpenAIServer, tmp_path: Path) -> Bench:
    bench = Bench(forkserver, server, tmp_path)
    (bench.workspace / "big.txt").write_text(BIG)
    return bench


def _compactions(state: SessionState) -> list[CompactionEntry]:
    return [e.entry for e in state.entries.values() if isinstance(e.entry, CompactionEntry)]


def _context(path: Path) -> list[messages.Message]:
    return build_context(load_session(path), None)


def _restart_changes_nothing(bench: Bench) -> None:
    before = bench.session.read_bytes()
    report = bench.start("restart", "auto", *SMALL).report()
    assert report["recovered"] is None
    assert "nothing to resume" in report["resume"]["error"]
    assert bench.session.read_bytes() == before


def _resume_completes_after_one_failed_attempt(bench: Bench) -> None:
    """A new process resumes the killed run: it recovers one failed attempt and completes
    the run; a restart after it changes nothing."""
    report = bench.start("resume", "auto", *SMALL).report()
    _restart_changes_nothing(bench)
    assert report["recovered"]["failedAttempts"] == 1
    assert report["resume"]["outcome"] == "completed"


def test_killed_during_the_summarization_request_the_resume_compacts_again(
    forkserver: ForkServerContext, server: OpenAIServer, tmp_path: Path
) -> None:
    bench = _bench(forkserver, server, tmp_path)
    try:
        hold = bench.hold()
        server.enqueue(_read(1), _read(2), text_reply("done"))
        server.enqueue_summaries(text_reply("SUMMARY never served", hold=hold))
        child = bench.start("run", "auto", *SMALL)
        server.wait_for_requests(3, TIMEOUT_S)
        context = _context(bench.session)
        child.kill()
        hold.set()
        state = load_session(bench.session)
        assert _compactions(state) == [] and _context(bench.session) == context
        assert [a.status for a in state.attempts.values()][-1] == "pending"
        server.enqueue_summaries(text_reply("SUMMARY from the resume"))
        _resume_completes_after_one_failed_attempt(bench)
    finally:
        bench.close()
    state = load_session(bench.session)
    (compaction,) = _compactions(state)
    assert compaction.summary == "SUMMARY from the resume"
    failed = [a for a in state.attempts.values() if a.status == "failed"]
    assert [a.error.kind for a in failed if a.error] == ["interrupted"]
    assert "SUMMARY from the resume" in server.requests[-1].raw.decode()


def test_killed_after_the_compaction_committed_the_resume_starts_from_the_summary(
    forkserver: ForkServerContext, server: OpenAIServer, tmp_path: Path
) -> None:
    bench = _bench(forkserver, server, tmp_path)
    try:
        hold = bench.hold()
        server.enqueue(_read(1), _read(2), text_reply("never served", hold=hold))
        server.enqueue_summaries(text_reply("SUMMARY kept"))
        child = bench.start("run", "auto", *SMALL)
        server.wait_for_requests(4, TIMEOUT_S)  # the request after the compaction
        child.kill()
        hold.set()
        server.enqueue(text_reply("done"))
        _resume_completes_after_one_failed_attempt(bench)
    finally:
        bench.close()
    state = load_session(bench.session)
    assert [c.summary for c in _compactions(state)] == ["SUMMARY kept"]  # not redone
    last = server.requests[-1].body["messages"]
    assert "SUMMARY kept" in last[2]["content"]
    assert sum("tools" not in r.body for r in server.requests) == 1


def test_killed_during_agent_compact_the_context_is_as_it_was(
    forkserver: ForkServerContext, server: OpenAIServer, tmp_path: Path
) -> None:
    bench = _bench(forkserver, server, tmp_path)
    tail = ("--keep-tail-tokens", "10")
    try:
        server.enqueue(_read(1), text_reply("done"))
        assert bench.start("run", "auto", *tail).report()["run"]["outcome"] == "completed"
        context = _context(bench.session)
        hold = bench.hold()
        server.enqueue_summaries(text_reply("SUMMARY never served", hold=hold))
        child = bench.start("compact", "auto", *tail)
        server.wait_for_requests(3, TIMEOUT_S)
        child.kill()
        hold.set()
        report = bench.start("resume", "auto", *tail).report()
        assert _context(bench.session) == context
        _restart_changes_nothing(bench)
        server.enqueue_summaries(text_reply("SUMMARY at last"))
        again = bench.start("compact", "auto", *tail).report()
    finally:
        bench.close()
    assert report["recovered"]["failedAttempts"] == 1
    assert "nothing to resume" in report["resume"]["error"]  # compactions are passed over
    ops = list(load_session(bench.session).operations.values())
    assert [(op.kind, op.status) for op in ops] == [
        ("run", "completed"),
        ("compaction", "interrupted"),
        ("compaction", "completed"),
    ]
    assert again["compact"]["outcome"] == "completed"
    assert [c.summary for c in _compactions(load_session(bench.session))] == ["SUMMARY at last"]
