"""The crash matrix: SIGKILL a real agent process, resume in a new one.

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
   workspace (replayed) or after the workspace moved (interrupted, not replayed).

Kills at random moments of multi-step runs: tests/test_agent_crash_random.py.

After every kill and resume: the file loads; what the killed process committed is still
there byte for byte (usage included); every intent left pending got exactly one result
(replayed for a safeRead in the same workspace, else interrupted), no `never` tool ran
twice and no effect happened without its intent; the request the resumed run sent was
accepted (the server answers 400 to a tool call without a tool message); the killed
operation is `interrupted` and a `resume` operation continued it and completed; and a
second restart changes no byte of the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import pytest
from crash import agent_child

from tiny_agent_nb.agent import INTERRUPTED_RESULT, NOT_STARTED
from tiny_agent_nb.session import (
    load_session,
)

from helpers.agent_crash import (
    APPEND_X,
    RESUME_USAGE,
    STEP_USAGE,
    TIMEOUT_S,
    Snapshot,
    check_after_kill,
    check_requests,
    check_resumes,
    marker_lines,
    pending,
    tool_messages,
)
from helpers.openai_server import (
    OpenAIServer,
    text_reply,
    tool_call,
    tool_calls_reply,
)
from helpers.polling import wait_until

# ---------------------------------------------------------------- explicit kill points


class Child:
    """`crash/agent_child.py MODE ...` in a new process forked from the forkserver (the
    package already imported, tests/conftest.py); its lines arrive on a pipe, read one by one."""

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
        when the agent dies (docs/spec.md §11): stop it here too, by the pid it wrote
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
