"""The crash matrix at random moments: SIGKILL a real agent process anywhere in a
multi-step run (bash, read_file, write_file), resume in a new one, itself sometimes killed.

Children are forked as in tests/test_agent_crash.py (`crash/agent_child.py`, from the
forkserver tests/conftest.py starts); every kill and resume is checked the same way
(tests/helpers/agent_crash.py). Kills go on until they have landed at every site of
SITES (each kind of work in flight in a run), in a resume, and recovery has both failed
an attempt in flight and interrupted a `never` tool; TINY_AGENT_AGENT_CRASH_KILLS (default
100) bounds them, and a loop that reaches it without that coverage fails. Where the sites
land is the seed's (TINY_AGENT_CRASH_SEED) and the machine's: about 20 kills cover them,
where 100 random ones (in two shards) landed on the same sites again, 40 in a bash command.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import signal
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import pytest
from crash import agent_child

from tiny_agent_nb.session import (
    HeaderInit,
    SessionState,
    SessionStore,
    load_session,
)

from helpers.agent_crash import (
    TIMEOUT_S,
    RequestStats,
    Snapshot,
    check_after_kill,
    check_requests,
    check_resumes,
    marker_lines,
)
from helpers.openai_server import (
    OpenAIServer,
    Reply,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage,
)
from helpers.polling import wait_until

SEED = int(os.environ.get("TINY_AGENT_CRASH_SEED", "20240917"))
KILLS = int(os.environ.get("TINY_AGENT_AGENT_CRASH_KILLS", "100"))
# Where a kill must have landed (Snapshot.where, by the process killed) before the loop
# stops: the work in flight that multi-step runs add. The rarer sites (about 1 kill in
# 14 or fewer) are left to chance, each also a kill point of tests/test_agent_crash.py:
# between tool calls (its point 2), a read_file in flight (6), before a run or after it
# (its second restart, nothing to resume), between two commits of one step.
SITES = {
    "run: model request in flight",
    "run: tool running: bash",
    "run: tool running: write_file",
}
KILLS_PER_EPISODE = 10  # a fresh workspace and session file every so many kills
RESUME_KILL_SHARE = 0.25  # share of resumes that are killed too


# ---------------------------------------------------------------- random kills


class Forked:
    """An agent child forked from the forkserver; its lines arrive on a pipe."""

    def __init__(self, ctx: ForkServerContext, argv: Sequence[str]) -> None:
        self.conn, sender = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=agent_child.forked, args=(list(argv), sender), daemon=True)
        self.proc.start()
        sender.close()  # the child holds the only write end: EOF once it is gone
        self.started = time.monotonic()
        self.report: dict[str, Any] | None = None
        self.errors: list[str] = []
        self.ready_at: float | None = None
        self.ended_at: float | None = None

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    def drain(self, timeout: float = 0.0) -> bool:
        """Read what the child wrote; True once it closed the pipe."""
        conn: Connection = self.conn
        while conn.poll(timeout):
            try:
                line = conn.recv_bytes().decode()
            except EOFError:
                return True
            if line.startswith("ready "):
                self.ready_at = time.monotonic()
            elif line.startswith("report "):
                self.ended_at = time.monotonic()
                self.report = json.loads(line.removeprefix("report "))
            elif line.startswith("error "):
                self.errors.append(line)
            timeout = 0.0
        return False

    def wait(self) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while self.report is None and not self.drain(max(deadline - time.monotonic(), 0)):
            if time.monotonic() >= deadline:
                self.kill()
                raise AssertionError(f"child {self.pid} gave no report in time: {self.errors}")
        self.proc.join(TIMEOUT_S)
        assert self.proc.exitcode == 0 and self.report is not None, (
            self.proc.exitcode,
            self.errors,
        )
        self.conn.close()
        return self.report

    def kill(self) -> bool:
        """SIGKILL; False when the child had finished on its own just before."""
        with contextlib.suppress(ProcessLookupError):  # it exited and was reaped
            os.kill(self.pid, signal.SIGKILL)
        self.proc.join(TIMEOUT_S)
        self.drain()
        self.conn.close()
        assert self.proc.exitcode in (0, -signal.SIGKILL), (self.proc.exitcode, self.errors)
        return self.proc.exitcode == -signal.SIGKILL


def writer_lock_free(session: Path) -> bool:
    """Whether a writer could take the session's lock (flock) now; released at once."""
    with session.open("rb") as stream:
        try:
            fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(stream.fileno(), fcntl.LOCK_UN)
        return True


def flock_holders(session: Path) -> str:
    """The processes with the session open, and their command lines (for a failure)."""
    found = []
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            if fd.resolve() == session.resolve():
                pid = fd.parent.parent.name
                cmdline = (fd.parent.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                found.append(f"{pid}: {cmdline.decode(errors='replace')}")
    return "; ".join(found) or "no process now"


@dataclass
class Matrix:
    ctx: ForkServerContext
    server: OpenAIServer
    root: Path
    rng: random.Random
    kills: int = 0
    episode: int = -1
    kills_in_episode: int = 0
    workspace: Path = Path()
    session: Path = Path()
    replies: int = 0
    checked_requests: int = 0
    totals: list[float] = field(default_factory=lambda: [0.3])  # fork to report
    works: list[float] = field(default_factory=lambda: [0.2])  # ready to report
    where: Counter[str] = field(default_factory=Counter)
    strategies: Counter[str] = field(default_factory=Counter)
    replayed: int = 0
    interrupted: int = 0
    failed_attempts: int = 0
    requests: RequestStats = field(default_factory=RequestStats)
    chains: int = 0
    unkilled_runs: int = 0

    def fail(self, what: str) -> str:
        return f"seed {SEED} (TINY_AGENT_CRASH_SEED), kill {self.kills}, {self.session}: {what}"

    def covered(self) -> bool:
        """Kills have landed at every site and in a resume (a chain of resumes), and
        recovery failed an attempt in flight and interrupted a `never` tool."""
        resumes = any(where.startswith("resume: ") for where in self.where)
        return (
            set(self.where) >= SITES
            and resumes
            and self.failed_attempts > 0
            and self.interrupted > 0
        )

    # ------------------------------------------------------------ the script
    def reply(self) -> Reply:
        """The n-th scripted answer: three rounds of tool calls, then a final text."""
        n = self.replies
        self.replies += 1
        t = f"t{n}"
        if n % 4 == 3:
            return text_reply(f"Finished round {n}.", usage=usage(120 + n % 7, 8, cost=0.0002))
        calls = [
            tool_call(f"{t}b", "bash", {"command": f"echo {t}b >> marker.txt"}),
            tool_call(f"{t}w", "write_file", {"path": f"notes/{t}w.txt", "content": f"{t}w\n" * 3}),
            tool_call(
                f"{t}r", "read_file", {"path": f"notes/t{n - 1}w.txt" if n % 2 else "README.md"}
            ),
        ]
        self.rng.shuffle(calls)
        return tool_calls_reply(*calls, usage=usage(100 + n % 5, 20, cost=0.001), chunk_size=16)

    def top_up(self) -> None:
        while self.server.pending_replies < 12:
            self.server.enqueue(self.reply())

    # ------------------------------------------------------------ children
    def new_episode(self) -> None:
        self.episode += 1
        self.kills_in_episode = 0
        root = self.root / f"episode-{self.episode}"
        self.workspace = root / "work"
        self.workspace.mkdir(parents=True)
        (self.workspace / "README.md").write_text("# Demo\n")
        self.session = root / "nb.agent.jsonl"
        here = os.path.realpath(self.workspace)
        init = HeaderInit(
            cwd=here, provider="openrouter", model="test/model", environment_identity=here
        )
        SessionStore.open(self.session, create=init).close()

    def fork(self, mode: str) -> Forked:
        self.top_up()
        argv = [
            mode,
            "--base-url",
            self.server.base_url,
            "--workspace",
            str(self.workspace),
            "--session",
            str(self.session),
        ]
        return Forked(self.ctx, argv)

    def attempt(self, mode: str, kill: bool) -> tuple[bool, dict[str, Any] | None]:
        """Run a child; with `kill`, SIGKILL it at a random moment. (killed, report)

        Where the moment falls: anywhere from the fork (it may die while starting),
        a random delay after the loop is wired, or right after its n-th commit. The
        delays are drawn within how long unkilled children took lately."""
        start_size = self.session.stat().st_size
        child = self.fork(mode)
        if not kill:
            report = child.wait()
            self.observe(child)
            return False, report
        strategy = self.rng.choices(
            ["any moment", "random delay once wired", "after the n-th commit"], [1, 3, 3]
        )[0]
        commits = self.rng.randint(1, 28)  # an unkilled run commits about 28 times
        total, work = (1.1 * statistics.median(d[-20:]) for d in (self.totals, self.works))
        delay = self.rng.uniform(0.0, total if strategy == "any moment" else work)
        while True:
            if child.drain():
                break  # finished before the kill was due
            now = time.monotonic()
            if strategy == "any moment":
                if now >= child.started + delay:
                    break
            elif strategy == "random delay once wired":
                if child.ready_at is not None and now >= child.ready_at + delay:
                    break
            else:
                with self.session.open("rb") as stream:
                    stream.seek(start_size)
                    if stream.read().count(b"\n") >= commits:
                        break
            assert now < child.started + TIMEOUT_S, self.fail("child hangs")
            time.sleep(0.0005)
        killed = child.kill()
        if killed:
            self.strategies[strategy] += 1
            return True, None
        self.observe(child)
        assert child.report is not None, self.fail("child exited without a report")
        return False, child.report

    def observe(self, child: Forked) -> None:
        assert child.ready_at is not None and child.ended_at is not None
        self.totals.append(child.ended_at - child.started)
        self.works.append(child.ended_at - child.ready_at)

    # ------------------------------------------------------------ one chain
    def chain(self, kills_wanted: int) -> None:
        """A run killed at random, then resumes (some killed too) until one finishes."""
        if self.episode < 0 or self.kills_in_episode >= KILLS_PER_EPISODE:
            self.new_episode()
        killed, report = self.attempt("run", kill=True)
        if not killed:
            assert report is not None and report["run"]["outcome"] == "completed", report
            self.unkilled_runs += 1
            return
        snapshots = [self.after_kill("run")]
        while True:
            kill = self.kills < kills_wanted and self.rng.random() < RESUME_KILL_SHARE
            killed, report = self.attempt("resume", kill=kill)
            if not killed:
                break
            snapshots.append(self.after_kill("resume"))
        assert report is not None
        self.check_chain(snapshots, report)
        self.chains += 1

    def after_kill(self, mode: str) -> Snapshot:
        self.kills += 1
        self.kills_in_episode += 1
        # A process the killed child was starting (a bash call between fork and exec)
        # holds a copy of its descriptors, the session's and so its lock, until it execs:
        # on a loaded machine, for a moment after the kill. A kernel restarted by hand
        # never meets that moment; the next child here would, and be refused as a second
        # writer. A lock that stays held fails here, naming who has the file open.
        try:
            wait_until(lambda: writer_lock_free(self.session), TIMEOUT_S, what="the lock")
        except AssertionError as exc:
            raise AssertionError(self.fail(f"{exc}: {flock_holders(self.session)}")) from None
        snap = Snapshot.take(self.session)
        self.where[f"{mode}: {snap.where()}"] += 1
        return snap

    def check_chain(self, snapshots: list[Snapshot], report: dict[str, Any]) -> None:
        raw = self.session.read_bytes()
        state = load_session(self.session)
        check_after_kill(snapshots, state, raw, self.workspace)
        resumes = check_resumes(snapshots, state)
        last = snapshots[-1]
        # What the last, unkilled, process recovered is exactly what the last kill left.
        if last.state.open_operation is None:
            assert report["recovered"] is None, self.fail(str(report))
        else:
            pending_now = last.pending_intents
            assert report["recovered"] == {
                "operationId": last.state.open_operation.id,
                "replayed": [i.tool_call_id for i in pending_now if i.replay_policy == "safeRead"],
                "interrupted": [i.tool_call_id for i in pending_now if i.replay_policy == "never"],
                "failedAttempts": sum(
                    a.status == "pending" and a.operation_id == last.state.open_operation.id
                    for a in last.state.attempts.values()
                ),
            }, self.fail(str(report))
            self.replayed += len(report["recovered"]["replayed"])
            self.interrupted += len(report["recovered"]["interrupted"])
            self.failed_attempts += report["recovered"]["failedAttempts"]
        latest = list(state.operations.values())[-1] if state.operations else None
        if "error" in report["resume"]:
            # The kill came before the run started, or after it completed.
            assert report["resume"]["error"] == "nothing to resume: no run was interrupted"
            assert latest is None or latest.status == "completed", self.fail(str(latest))
        else:
            assert report["resume"]["outcome"] == "completed", self.fail(str(report))
            assert resumes and resumes[-1] == report["resume"]["operationId"]
            assert latest is not None and latest.status == "completed"
        self.check_effects(state)
        requests = self.server.requests
        stats = check_requests(requests[self.checked_requests :], state)
        self.requests.not_started |= stats.not_started
        self.requests.cut += stats.cut
        self.requests.after_answer += stats.after_answer
        self.checked_requests = len(requests)
        # A second restart in another new process changes nothing.
        again = self.fork("restart").wait()
        assert again["recovered"] is None, self.fail(str(again))
        assert "nothing to resume" in again["resume"]["error"], self.fail(str(again))
        assert self.session.read_bytes() == raw, self.fail("a second restart wrote")

    def check_effects(self, state: SessionState) -> None:
        """No `never` tool ran twice; no effect without its intent; completed ones happened."""
        intents = list(state.tool_intents.values())
        bash = {i.arguments["command"].split()[1]: i for i in intents if i.tool.name == "bash"}
        lines = marker_lines(self.workspace)
        assert len(lines) == len(set(lines)), self.fail(f"a bash call ran twice: {lines}")
        assert set(lines) <= set(bash), self.fail("an effect without an intent")
        completed = {token for token, i in bash.items() if i.status == "completed"}
        interrupted = {token for token, i in bash.items() if i.status == "interrupted"}
        assert completed <= set(lines), self.fail("a completed bash call left no trace")
        assert len(lines) == len(completed) + len(set(lines) & interrupted)
        writes = {i.arguments["path"]: i for i in intents if i.tool.name == "write_file"}
        notes = self.workspace / "notes"
        written = (
            {p.relative_to(self.workspace).as_posix(): p for p in notes.iterdir()}
            if notes.exists()
            else {}
        )
        assert set(written) <= set(writes), self.fail("a file written without an intent")
        for path, intent in writes.items():
            content = intent.arguments["content"]
            if intent.status == "completed":
                assert written[path].read_text() == content
            elif path in written:
                assert intent.status == "interrupted"
                assert content.startswith(written[path].read_text())


@pytest.mark.slow
def test_random_kills_then_resume_in_new_processes(
    tmp_path: Path, server: OpenAIServer, forkserver: ForkServerContext
) -> None:
    matrix = Matrix(forkserver, server, tmp_path, random.Random(SEED))
    started = time.monotonic()
    while matrix.kills < KILLS and not matrix.covered():
        matrix.chain(KILLS)
    elapsed = time.monotonic() - started
    report = (
        f"seed {SEED}: {matrix.kills} SIGKILLs in {matrix.chains} chains, "
        f"{elapsed:.1f}s "
        f"({matrix.unkilled_runs} runs finished before their kill); kills by strategy "
        f"{dict(matrix.strategies)}; where they landed {dict(sorted(matrix.where.items()))}; "
        f"recovery replayed {matrix.replayed} reads, interrupted {matrix.interrupted} "
        f"intents, failed {matrix.failed_attempts} attempts in flight; "
        f"{len(matrix.requests.not_started)} never-started calls answered 'Not run'; "
        f"{len(server.requests)} requests ({matrix.requests.cut} cut short by a kill, "
        f"{matrix.requests.after_answer} resumed after a settled final answer)"
    )
    print("\n" + report)
    assert matrix.covered(), f"{KILLS} kills did not land at every site of SITES: {report}"


def test_the_crash_loops_children_are_forked_with_their_modules_already_imported(
    forkserver: ForkServerContext,
) -> None:
    """The forkserver imported the children's modules (tests/conftest.py preloads them)
    before forking: each of the SIGKILLed children would import them again."""
    ours, theirs = forkserver.Pipe(duplex=False)
    child = forkserver.Process(target=agent_child.preloaded, args=(theirs,))
    child.start()
    theirs.close()
    assert json.loads(ours.recv_bytes()) == [True, True]  # agent_child, commit_loop
    child.join(TIMEOUT_S)
    assert child.exitcode == 0
