"""The crash matrix (DESIGN §6): SIGKILL a real agent process, resume in a new one.

A child process (`crash/agent_child.py`, forked from a forkserver that has imported the
package, tests/conftest.py) wires `AgentLoop` to the real `Provider`, talking
to the OpenAI-compatible server that runs in this (the parent) process, and to the
built-in tools acting on a workspace under tmp_path. The parent kills it with SIGKILL at
a chosen point, then starts a NEW process that recovers and resumes, then a third one
that restarts once more. Kill points, each its own test:

1. while the model request is in flight (the server holds the reply);
2. after the assistant entry, before toolStarted (the child is asking for approval);
3. after toolStarted, before the effect (bash waits for a `go` file);
4. after the effect, before the result (bash appended to marker.txt, then sleeps);
5. after the result (the server holds the NEXT request);
6. a read_file intent pending (a ~50 MB file being read), resumed in the same
   workspace (replayed) or after the workspace moved (interrupted, not replayed);
7. over a hundred kills at random moments of multi-step runs (bash, read_file,
   write_file), each followed by a resume that is itself sometimes killed.

After every kill and resume: the file loads; what the killed process committed is still
there byte for byte (usage included); every intent left pending got exactly one result
(replayed for a safeRead in the same workspace, else interrupted), no `never` tool ran
twice and no effect happened without its intent; the request the resumed run sent was
accepted (the server answers 400 to a tool call without a tool message); the killed
operation is `interrupted` and a `resume` operation continued it and completed; and a
second restart changes no byte of the file.

Random matrix: TINY_AGENT_AGENT_CRASH_KILLS kills (default 100), seed
TINY_AGENT_CRASH_SEED, in SHARDS independent tests (each its own seed stream, workspace,
sessions and share of the kills), so a parallel run spreads them over workers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import pytest
from crash import agent_child

from tiny_agent_nb.agent import INTERRUPTED_RESULT, NOT_STARTED
from tiny_agent_nb.session import (
    HeaderInit,
    NotASessionError,
    SessionState,
    SessionStore,
    ToolIntent,
    ToolResultEntry,
    load_session,
)

from helpers.openai_server import (
    OpenAIServer,
    RecordedRequest,
    Reply,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage,
)
from helpers.polling import wait_until

TIMEOUT_S = 20.0
SEED = int(os.environ.get("TINY_AGENT_CRASH_SEED", "20240917"))
KILLS = int(os.environ.get("TINY_AGENT_AGENT_CRASH_KILLS", "100"))
# Each shard has enough kills (50) that both kinds of in-flight work are hit: about a
# third of kills land in a `never` tool and two in five in a model request.
SHARDS = 2
KILLS_PER_EPISODE = 10  # a fresh workspace and session file every so many kills
RESUME_KILL_SHARE = 0.25  # share of resumes that are killed too
STEP_USAGE = usage(100, 10, cost=0.001)
RESUME_USAGE = usage(140, 6, cost=0.0004)
APPEND_X = "echo x >> marker.txt"


def try_load(path: Path) -> SessionState | None:
    """The session as a reader sees it while a writer may still be appending."""
    try:
        return load_session(path)
    except (FileNotFoundError, NotASessionError):
        return None


def pending(path: Path, tool: str) -> bool:
    state = try_load(path)
    return state is not None and any(
        i.tool.name == tool and i.status == "pending" for i in state.tool_intents.values()
    )


# ---------------------------------------------------------------- snapshots and checks


@dataclass(frozen=True)
class Snapshot:
    """The session file right after a kill."""

    raw: bytes
    state: SessionState

    @classmethod
    def take(cls, path: Path) -> Snapshot:
        raw = path.read_bytes()
        return cls(raw, load_session(path))  # a kill never leaves a file that fails to load

    @property
    def committed(self) -> bytes:
        return self.raw[: self.raw.rfind(b"\n") + 1]

    @property
    def pending_intents(self) -> list[ToolIntent]:
        return [i for i in self.state.tool_intents.values() if i.status == "pending"]

    def where(self) -> str:
        """What the file shows in flight when the process died (for a resume killed
        before it recovered: what the previous process left)."""
        state = self.state
        op = state.open_operation
        if op is None:
            return "no operation open"
        intents = sorted({i.tool.name for i in self.pending_intents})
        if intents:
            return "tool running: " + "+".join(intents)
        if any(a.status == "pending" for a in state.attempts.values()):
            return "model request in flight"
        if op.unanswered_tool_calls:
            return "between tool calls"
        return "between commits"


def usage_facts(state: SessionState) -> dict[str, Any]:
    return {f.id: f for f in state.facts if f.kind == "usage"}


def results_per_intent(state: SessionState) -> Counter[str]:
    """Tool result entries in the file, counted per toolStarted (duplicates would show)."""
    return Counter(
        f.entry.toolStartedId
        for f in state.facts
        if f.kind == "entry" and isinstance(f.entry, ToolResultEntry)
    )


def check_after_kill(
    snapshots: Sequence[Snapshot], state: SessionState, raw: bytes, workspace: Path
) -> None:
    """What must hold once a new process, working in `workspace`, recovered after each
    of `snapshots`' kills."""
    environment = os.path.realpath(workspace)
    assert state.torn_tail_bytes == 0 and raw.endswith(b"\n")
    usage_after = usage_facts(state)
    for snap in snapshots:
        # Append-only: every byte the killed process committed is still there.
        assert raw.startswith(snap.committed)
        # Usage: every fact present before is present after, totals never shrink.
        assert usage_facts(snap.state).items() <= usage_after.items()
        before, after = snap.state.totals.summary(), state.totals.summary()
        assert all(before[k] <= after[k] for k in before if before[k] is not None), (before, after)
        # Every intent left pending got its one result: replayed if it was a safe read of
        # the same workspace, else interrupted (never run again).
        for intent in snap.pending_intents:
            same = intent.environment_identity == environment
            replay = intent.replay_policy == "safeRead" and same
            expected = "replayed" if replay else "interrupted"
            assert state.tool_intents[intent.id].status == expected, intent
        if snap.state.open_operation is not None:
            assert state.operations[snap.state.open_operation.id].status == "interrupted"
    assert state.open_operation is None
    assert all(a.status != "pending" for a in state.attempts.values())
    assert all(i.status != "pending" for i in state.tool_intents.values())
    assert results_per_intent(state) == Counter(dict.fromkeys(state.tool_intents, 1))


def check_resumes(snapshots: Sequence[Snapshot], state: SessionState) -> list[str]:
    """The operations started after the first kill are resumes, each continuing the one
    before it. Returns their ids."""
    known = set(snapshots[0].state.operations)
    operations = list(state.operations.values())
    new = [op for op in operations if op.id not in known]
    for op in new:
        previous = operations[operations.index(op) - 1]
        assert op.kind == "resume" and op.resumes_operation_id == previous.id, op
        assert previous.status == "interrupted"
    return [op.id for op in new]


@dataclass
class RequestStats:
    not_started: set[str] = field(default_factory=set)  # calls answered "Not run"
    cut: int = 0  # bodies a kill cut short (the server refused them)
    after_answer: int = 0  # requests ending with an assistant message (see below)


def check_requests(requests: Sequence[RecordedRequest], state: SessionState) -> RequestStats:
    """Every request the server got was a valid conversation it answered; every tool
    message says what the session says."""
    by_call = {i.tool_call_id: i for i in state.tool_intents.values()}
    stats = RequestStats()
    for request in requests:
        assert request.finished.wait(TIMEOUT_S), request
        if request.problem is not None:
            # Only a body cut short by the kill of its sender may be refused (the refusal
            # then finds the client gone).
            declared = int(request.headers.get("content-length", "-1"))
            assert request.body is None and len(request.raw) < declared, request.problem
            stats.cut += 1
            continue
        assert request.status == 200, (request.status, request.problem)
        # A kill after a final answer settled but before operationFinished: the operation
        # is interrupted and its resume asks the model again after its own answer.
        stats.after_answer += request.body["messages"][-1]["role"] == "assistant"
        for message in request.body["messages"]:
            if message["role"] != "tool":
                continue
            intent = by_call.get(message["tool_call_id"])
            if intent is None:
                assert message["content"] == NOT_STARTED, message
                stats.not_started.add(message["tool_call_id"])
                continue
            result = state.entries[intent.result_entry_id].entry
            assert isinstance(result, ToolResultEntry)
            assert message["content"] == result.message.content, message
            if intent.status == "interrupted":
                assert message["content"] == INTERRUPTED_RESULT, message
    return stats


def marker_lines(workspace: Path) -> list[str]:
    marker = workspace / "marker.txt"
    return marker.read_text().splitlines() if marker.exists() else []


def tool_messages(request: RecordedRequest) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"] for m in request.body["messages"] if m["role"] == "tool"
    }


# ---------------------------------------------------------------- explicit kill points


class Child:
    """`crash/agent_child.py MODE ...` in a new process forked from the forkserver (the
    package already imported: see `Forked`); its lines arrive on a pipe, read one by one."""

    def __init__(self, ctx: ForkServerContext, argv: Sequence[str]) -> None:
        self.conn, theirs = ctx.Pipe(duplex=True)  # duplex: an approval answer goes back
        self.proc = ctx.Process(target=agent_child.forked, args=(list(argv), theirs, True))
        self.proc.daemon = True
        self.proc.start()
        theirs.close()  # the child holds the only other end: EOF once it is gone
        self.errors: list[str] = []

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    def expect(self, prefix: str) -> str:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            line = None
            with contextlib.suppress(EOFError):
                if self.conn.poll(max(deadline - time.monotonic(), 0)):
                    line = self.conn.recv_bytes().decode()
            if line is None:
                self.stop()
                raise AssertionError(f"child never printed {prefix!r}: {self.errors}")
            if line.startswith("error "):
                self.errors.append(line)
            if line.startswith(prefix):
                return line

    def report(self) -> dict[str, Any]:
        line = self.expect("report ")
        self.proc.join(TIMEOUT_S)
        assert self.proc.exitcode == 0, (self.proc.exitcode, self.errors)
        return json.loads(line.removeprefix("report "))  # type: ignore[no-any-return]

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.proc.join(TIMEOUT_S)
        assert self.proc.exitcode == -signal.SIGKILL, (self.proc.exitcode, self.errors)

    def stop(self) -> None:
        """SIGKILL unless it has exited; for a failed test's clean-up."""
        if self.proc.exitcode is None:
            with contextlib.suppress(ProcessLookupError):  # it exited and was reaped
                os.kill(self.pid, signal.SIGKILL)
            self.proc.join(TIMEOUT_S)


class Bench:
    """A workspace, a session file and the server; starts and kills children."""

    def __init__(self, ctx: ForkServerContext, server: OpenAIServer, root: Path) -> None:
        self.ctx = ctx
        self.server = server
        self.root = root
        self.workspace = root / "work"
        self.workspace.mkdir()
        (self.workspace / "README.md").write_text("# Demo\n")
        self.session = root / "nb.agent.jsonl"
        self.children: list[Child] = []
        self.holds: list[threading.Event] = []

    def start(self, mode: str, approval: str = "auto", *extra: str) -> Child:
        argv = [
            *extra,
            mode,
            "--base-url",
            self.server.base_url,
            "--workspace",
            str(self.workspace),
            "--session",
            str(self.session),
            "--approval",
            approval,
        ]
        child = Child(self.ctx, argv)
        self.children.append(child)
        return child

    def finish(self, mode: str) -> dict[str, Any]:
        return self.start(mode).report()

    def hold(self) -> threading.Event:
        event = threading.Event()
        self.holds.append(event)
        return event

    def bash_pid(self) -> int | None:
        """The pid a bash command wrote (`echo $$ > bash.pid`); it leads its own group."""
        pid_file = self.workspace / "bash.pid"
        text = pid_file.read_text() if pid_file.exists() else ""
        return int(text) if text.endswith("\n") else None  # written whole by one echo

    def kill_bash_group(self) -> None:
        """The bash command runs in its own process group, under the guard that ends it
        when the agent dies (docs/spec.md §20): stop it here too, by the pid it wrote
        itself, should the guard not have done so yet."""
        pgid = self.bash_pid()
        assert pgid is not None
        with contextlib.suppress(ProcessLookupError):  # the guard was first
            os.killpg(pgid, signal.SIGKILL)

    def move_workspace(self) -> None:
        moved = self.root / "moved"
        self.workspace.rename(moved)
        self.workspace = moved

    def close(self) -> None:
        for event in self.holds:
            event.set()
        for child in self.children:
            child.stop()
        pgid = self.bash_pid()
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)


@dataclass(frozen=True)
class Expect:
    """What the kill left, and what the new process must find and do."""

    where: str  # what the file shows in flight (Snapshot.where)
    replayed: tuple[str, ...] = ()  # call ids of pending intents it replays
    interrupted: tuple[str, ...] = ()  # ... and marks interrupted
    failed_attempts: int = 0  # attempts in flight, failed as interrupted
    not_started: tuple[str, ...] = ()  # tool calls answered "Not run" in the next request
    completed: tuple[str, ...] = ()  # tool calls whose result was committed before the kill
    marker: int = 0  # lines in marker.txt at the end
    sent: tuple[str, ...] = ("system", "user", "assistant", "tool")  # roles of that request


def kill_during_model_request(b: Bench) -> Expect:
    hold = b.hold()
    b.server.enqueue(tool_calls_reply(tool_call("b1", "bash", {"command": APPEND_X}), hold=hold))
    child = b.start("run")
    b.server.wait_for_requests(1, TIMEOUT_S)
    child.kill()
    hold.set()  # the answer goes to a dead socket
    return Expect("model request in flight", failed_attempts=1, sent=("system", "user"))


def kill_after_assistant_entry(b: Bench) -> Expect:
    b.server.enqueue(
        tool_calls_reply(tool_call("b1", "bash", {"command": APPEND_X}), usage=STEP_USAGE)
    )
    child = b.start("run", approval="ask")
    assert child.expect("asking ") == "asking bash"
    child.kill()
    return Expect("between tool calls", not_started=("b1",))


def kill_after_tool_started(b: Bench) -> Expect:
    command = "echo $$ > bash.pid; until [ -e go ]; do sleep 0.01; done; " + APPEND_X
    b.server.enqueue(
        tool_calls_reply(tool_call("b1", "bash", {"command": command}), usage=STEP_USAGE)
    )
    child = b.start("run")
    wait_until(
        lambda: pending(b.session, "bash") and b.bash_pid() is not None,
        TIMEOUT_S,
        "the bash intent and its command running",
        interval=0.002,
    )
    child.kill()
    b.kill_bash_group()
    (b.workspace / "go").touch()  # from now on, running the command again would append
    return Expect("tool running: bash", interrupted=("b1",))


def kill_after_effect(b: Bench) -> Expect:
    command = "echo $$ > bash.pid; " + APPEND_X + "; sleep 60"
    b.server.enqueue(
        tool_calls_reply(tool_call("b1", "bash", {"command": command}), usage=STEP_USAGE)
    )
    child = b.start("run")
    wait_until(
        lambda: marker_lines(b.workspace) == ["x"],
        TIMEOUT_S,
        "the effect (a line in marker.txt)",
        interval=0.002,
    )
    child.kill()
    b.kill_bash_group()
    return Expect("tool running: bash", interrupted=("b1",), marker=1)


def kill_after_result(b: Bench) -> Expect:
    hold = b.hold()
    b.server.enqueue(
        tool_calls_reply(tool_call("b1", "bash", {"command": APPEND_X}), usage=STEP_USAGE),
        text_reply("never delivered", hold=hold),
    )
    child = b.start("run")
    b.server.wait_for_requests(2, TIMEOUT_S)
    child.kill()
    hold.set()
    return Expect("model request in flight", failed_attempts=1, completed=("b1",), marker=1)


TWO_CALLS_ANSWERED = ("system", "user", "assistant", "tool", "tool")


BIG_LINES = 2_000_000


def pending_read(b: Bench) -> None:
    """read_file of a ~50 MB file (reading, decoding and splitting it takes a good part
    of a second): the kill lands while it runs; bash comes after it, never started."""
    (b.workspace / "big.log").write_bytes(b"a line of a large log file\n" * BIG_LINES)
    b.server.enqueue(
        tool_calls_reply(
            tool_call("r1", "read_file", {"path": "big.log", "limit": 2}),
            tool_call("b1", "bash", {"command": APPEND_X}),
            usage=STEP_USAGE,
        )
    )
    child = b.start("run")
    wait_until(
        lambda: pending(b.session, "read_file"), TIMEOUT_S, "the read_file intent", interval=0.002
    )
    os.kill(child.pid, signal.SIGSTOP)  # freeze it, then make sure the read is still open
    assert pending(b.session, "read_file"), "the read finished before the kill; file too small?"
    child.kill()


def kill_during_read_same_workspace(b: Bench) -> Expect:
    pending_read(b)
    return Expect(
        "tool running: read_file", replayed=("r1",), not_started=("b1",), sent=TWO_CALLS_ANSWERED
    )


def kill_during_read_workspace_moved(b: Bench) -> Expect:
    pending_read(b)
    b.move_workspace()  # the environment identity changes: the read is no longer the same
    return Expect(
        "tool running: read_file",
        interrupted=("r1",),
        not_started=("b1",),
        sent=TWO_CALLS_ANSWERED,
    )


POINTS: dict[str, Callable[[Bench], Expect]] = {
    "1-model-request-in-flight": kill_during_model_request,
    "2-after-assistant-entry": kill_after_assistant_entry,
    "3-after-toolStarted-before-effect": kill_after_tool_started,
    "4-after-effect-before-result": kill_after_effect,
    "5-after-result-next-request-held": kill_after_result,
    "6a-read-pending-same-workspace": kill_during_read_same_workspace,
    "6b-read-pending-workspace-moved": kill_during_read_workspace_moved,
}


@pytest.fixture
def bench(forkserver: ForkServerContext, server: OpenAIServer, tmp_path: Path) -> Iterator[Bench]:
    b = Bench(forkserver, server, tmp_path)
    yield b
    b.close()


@pytest.mark.parametrize("point", list(POINTS))
def test_kill_point_then_resume_in_a_new_process(
    point: str, bench: Bench, server: OpenAIServer
) -> None:
    started = time.monotonic()
    expect = POINTS[point](bench)
    before = Snapshot.take(bench.session)
    killed = before.state.open_operation
    assert killed is not None and killed.kind == "run"
    assert before.where() == expect.where
    assert sorted(i.tool_call_id for i in before.pending_intents) == sorted(
        expect.replayed + expect.interrupted
    )
    pending_attempts = [a for a in before.state.attempts.values() if a.status == "pending"]
    assert len(pending_attempts) == expect.failed_attempts

    first = len(server.requests)
    server.enqueue(text_reply("Resumed and done.", usage=RESUME_USAGE))
    report = bench.finish("resume")

    # What recover() did in the new process.
    assert report["recovered"] == {
        "operationId": killed.id,
        "replayed": list(expect.replayed),
        "interrupted": list(expect.interrupted),
        "failedAttempts": expect.failed_attempts,
    }
    assert report["resume"]["outcome"] == "completed"
    assert report["resume"]["text"] == "Resumed and done."
    raw = bench.session.read_bytes()
    state = load_session(bench.session)
    check_after_kill([before], state, raw, bench.workspace)
    assert check_resumes([before], state) == [report["resume"]["operationId"]]
    ops = list(state.operations.values())
    assert [(o.kind, o.status) for o in ops] == [("run", "interrupted"), ("resume", "completed")]
    assert ops[1].resumes_operation_id == killed.id
    for attempt in pending_attempts:
        resolved = state.attempts[attempt.id]
        assert resolved.status == "failed" and resolved.error is not None
        assert resolved.error.kind == "interrupted"
    assert state.totals.summary()["cost"] == pytest.approx(
        (before.state.totals.known_cost or 0) + 0.0004
    )

    # What the model was sent: one request, accepted, every tool call answered.
    requests = server.requests
    assert len(requests) == first + 1
    resumed = requests[first]
    stats = check_requests(requests, state)
    assert (stats.not_started, stats.cut) == (set(expect.not_started), 0)
    assert [m["role"] for m in resumed.body["messages"]] == list(expect.sent)
    answers = tool_messages(resumed)
    for call_id in expect.not_started:
        assert answers[call_id] == NOT_STARTED
    for call_id in expect.interrupted:
        assert answers[call_id] == INTERRUPTED_RESULT
    for call_id in expect.replayed:
        replayed = f"[big.log: lines 1-2 of {BIG_LINES}]\na line of a large log file\n"
        assert answers[call_id].startswith(f"[big.log: lines 1-2 of {BIG_LINES}]"), replayed
    for call_id in expect.completed:
        assert answers[call_id] == "(no output)\n[exit code 0]"
    assert set(answers) == {
        *expect.not_started,
        *expect.interrupted,
        *expect.replayed,
        *expect.completed,
    }

    # No `never` tool ran twice, and none ran that never started.
    assert marker_lines(bench.workspace) == ["x"] * expect.marker

    # A second restart, in yet another process, changes nothing.
    again = bench.finish("restart")
    assert again["recovered"] is None
    assert again["resume"] == {"error": "nothing to resume: no run was interrupted"}
    assert bench.session.read_bytes() == raw
    assert len(server.requests) == first + 1

    roles = [m["role"] for m in resumed.body["messages"]]
    print(
        f"\n[{point}] killed with {before.where()!r}; recover: {report['recovered']}; "
        f"resume: {report['resume']['outcome']}; sent {roles}; tool answers {answers}; "
        f"{time.monotonic() - started:.2f}s"
    )


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
    shard: int = 0
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
        return (
            f"seed {SEED} (TINY_AGENT_CRASH_SEED) shard {self.shard}, kill {self.kills}, "
            f"{self.session}: {what}"
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
@pytest.mark.parametrize("shard", range(SHARDS))
def test_random_kills_then_resume_in_new_processes(
    tmp_path: Path, server: OpenAIServer, forkserver: ForkServerContext, shard: int
) -> None:
    kills = KILLS // SHARDS + (shard < KILLS % SHARDS)
    rng = random.Random(f"{SEED}/{shard}")
    matrix = Matrix(forkserver, server, tmp_path, rng, shard)
    started = time.monotonic()
    while matrix.kills < kills:
        matrix.chain(kills)
    elapsed = time.monotonic() - started
    report = (
        f"seed {SEED} shard {shard}: {matrix.kills} SIGKILLs in {matrix.chains} chains, "
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
    assert matrix.kills >= kills, report
    if kills >= 50:  # enough kills that both kinds of in-flight work were hit
        assert matrix.failed_attempts > 0 and matrix.interrupted > 0, report


def test_the_crash_loops_children_are_forked_with_their_modules_already_imported(
    forkserver: ForkServerContext,
) -> None:
    """The forkserver imported the children's modules (tests/conftest.py preloads them)
    before forking: each of the hundreds of SIGKILLed children would import them again."""
    ours, theirs = forkserver.Pipe(duplex=False)
    child = forkserver.Process(target=agent_child.preloaded, args=(theirs,))
    child.start()
    theirs.close()
    assert json.loads(ours.recv_bytes()) == [True, True]  # agent_child, commit_loop
    child.join(TIMEOUT_S)
    assert child.exitcode == 0
