"""Power mode's group commit (docs/session-format.md §6.2): a commit that precedes an effect (an
intent, an operation's start or end) is synced before it returns; one that only records
what came of an effect is written at once and synced by the next one.

Syncs are counted as the OS is asked for them: os.fsync and os.fdatasync are wrapped in
this test process (strace-like), each call noting the session file's size at that
moment. A power cut may leave any file whose bytes up to the last sync are intact, and
no more; `test_a_power_cut_at_any_point_loses_no_intent_of_a_started_effect` rebuilds
each such file and resumes it.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tiny_agent_nb.agent import AgentLoop, LoopConfig, RecoveryReport, RunResult
from tiny_agent_nb.provider import Completion, Provider, ProviderConfig
from tiny_agent_nb.session import (
    HeaderInit,
    SessionError,
    SessionStore,
    SessionWriteError,
    load_session,
)
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.tools import (
    Tool,
    ToolArguments,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    builtin_registry,
)

from helpers.openai_server import OpenAIServer, error_reply, text_reply, tool_call, tool_calls_reply
from helpers.scenario import READ_FILE, Run

KEY = "sk-test-SECRET-0123456789abcdef"
Event = tuple[str, Any]  # ("sync", size) | ("request", n) | ("tool", call id)


class SyncLog:
    """Every fsync / fdatasync of the session file in this process, as the file's size
    then; effects are noted in the same list, so each one sees the syncs before it."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = path
        self.events: list[Event] = []
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name)))

    def _wrap(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            st = os.fstat(fd)
            if self.path.exists() and (st.st_dev, st.st_ino) == _identity(self.path):
                self.events.append(("sync", st.st_size))
            real(fd)

        return sync

    def syncs(self) -> list[int]:
        return [size for kind, size in self.events if kind == "sync"]

    def durable(self, before: int | None = None) -> int:
        """The size at the last sync before event `before` (all of them: None)."""
        sizes = [s for k, s in self.events[:before] if k == "sync"]
        return sizes[-1] if sizes else 0


def _identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


class Mark(Tool):
    """An effect that must never run twice: it notes itself in the sync log."""

    name = "mark"
    description = "Marks a spot."
    replay_policy: ClassVar = "never"
    log: list[Event]

    class Arguments(ToolArguments):
        spot: str

    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.log.append(("tool", arguments["spot"]))
        return ToolOutput(f"marked {arguments['spot']}")


class Noting:
    """The real provider, noting each request in the sync log just before it is sent."""

    def __init__(self, provider: Provider, log: list[Event]) -> None:
        self.provider, self.log = provider, log

    def complete(self, *args: Any, **kwargs: Any) -> Completion:
        self.log.append(("request", sum(k == "request" for k, _ in self.log) + 1))
        return self.provider.complete(*args, **kwargs)


def _loop(
    store: SessionStore, server: OpenAIServer, workspace: Path, log: list[Event], mark: Mark
) -> tuple[AgentLoop, Provider]:
    mark.log = log
    config = ProviderConfig(model="test/model", base_url=server.base_url, api_key=KEY)
    provider = Provider(config)
    builtins = builtin_registry()
    tools = ToolRegistry([*(t for n in builtins.names if (t := builtins.get(n))), mark])
    loop = AgentLoop(
        store,
        Noting(provider, log),
        tools,
        ToolContext(workspace=workspace, namespace={}, secrets=()),
        LoopConfig(
            config,
            approval="auto",  # its `mark` tool changes things; no one is asked here
        ),
        sleep=lambda _: None,
    )
    return loop, provider


def _open(path: Path, workspace: Path) -> SessionStore:
    init = HeaderInit(
        cwd=str(workspace),
        provider="openrouter",
        model="test/model",
        environment_identity=str(workspace),
    )
    return SessionStore.open(path, create=init, durability="power")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "README.md").write_text("# Demo\n")
    return root.resolve()


def _run(
    server: OpenAIServer, path: Path, workspace: Path, log: SyncLog, replies: Sequence[Any]
) -> RunResult:
    """One run in power mode; checks that its end was synced before `run` returned."""
    server.enqueue(*replies)
    store = _open(path, workspace)
    loop, provider = _loop(store, server, workspace, log.events, Mark())
    try:
        result = loop.run("Mark the spots")
        assert log.durable() == path.stat().st_size, "the run's end was not synced"
    finally:
        loop.close()
        store.close()
        provider.close()
    return result


def _transactions(data: bytes) -> list[tuple[int, list[dict[str, Any]]]]:
    """(end offset, facts) of each transaction line after the header."""
    out, offset = [], 0
    for number, line in enumerate(data.split(b"\n")[:-1]):
        offset += len(line) + 1
        if number:
            value = json.loads(line)
            out.append((offset, value if isinstance(value, list) else [value]))
    return out


def _types(facts: list[dict[str, Any]]) -> list[str]:
    return [fact["record"]["type"] if fact["kind"] == "record" else fact["kind"] for fact in facts]


# ---------------------------------------------------------------- the count


def test_a_tool_step_in_power_mode_syncs_twice(
    server: OpenAIServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "nb.agent.jsonl"
    log = SyncLog(path, monkeypatch)
    steps = 3
    replies = [
        tool_calls_reply(tool_call(f"call_{i}", "read_file", {"path": "README.md"}))
        for i in range(steps)
    ]
    result = _run(server, path, workspace, log, [*replies, text_reply("Read it thrice.")])
    assert result.outcome == "completed"
    created = 1  # the header (the directory's sync is of another file)
    ends = {end: _types(facts) for end, facts in _transactions(path.read_bytes())}
    synced = [ends[size] for size in log.syncs()[created:]]
    # What each sync made durable: the transaction that precedes an effect (the answer
    # and the result before it ride along, unsynced until then).
    assert synced == [
        ["entry", "runStarted"],
        ["systemPrompt", "stepAttempt"],  # the first request records what it is told
        ["toolStarted"],
        *[["stepAttempt"], ["toolStarted"]] * (steps - 1),
        ["stepAttempt"],
        ["operationFinished"],
    ]
    assert len(ends) == 1 + 4 * steps + 2 + 1  # 16 transactions, 9 syncs


# ---------------------------------------------------------------- the power cut


def test_a_power_cut_at_any_point_loses_no_intent_of_a_started_effect(
    server: OpenAIServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "nb.agent.jsonl"
    log = SyncLog(path, monkeypatch)
    replies = [
        error_reply(429, "slow down"),  # attemptFailed: an outcome, not synced alone
        tool_calls_reply(
            tool_call("call_a", "mark", {"spot": "a"}),
            tool_call("call_r", "read_file", {"path": "README.md"}),
        ),
        tool_calls_reply(tool_call("call_b", "mark", {"spot": "b"})),
        text_reply("Marked a and b."),
    ]
    assert _run(server, path, workspace, log, replies).outcome == "completed"
    data = path.read_bytes()
    events = log.events
    effects = [(i, kind, what) for i, (kind, what) in enumerate(events) if kind != "sync"]
    assert [(k, w) for _, k, w in effects] == [
        ("request", 1),
        ("request", 2),
        ("tool", "a"),
        ("request", 3),
        ("tool", "b"),
        ("request", 4),
    ]
    # 1. Every effect started with its intent inside what had been synced before it.
    for i, kind, what in effects:
        facts = [fact for _, tx in _transactions(data[: log.durable(i)]) for fact in tx]
        records = [fact["record"] for fact in facts if fact["kind"] == "record"]
        if kind == "request":
            attempts = [r for r in records if r["type"] == "stepAttempt"]
            assert len(attempts) == what, f"request {what} was sent before its stepAttempt synced"
        else:
            started = [r for r in records if r["type"] == "toolStarted"]
            assert f"call_{what}" in [r["toolCallId"] for r in started], (
                f"tool {what} ran before its toolStarted synced"
            )
    # 2. What a power cut may leave, resumed: the file up to a sync, and maybe some of the
    # lines written after it (any line end). No effect runs again, and every effect that
    # may have started by then is known (settled, or pending and settled interrupted).
    cuts = sorted(set(log.syncs()))
    assert cuts[-1] == len(data)
    for cut in [end for end, _ in _transactions(data)]:
        synced = max(size for size in cuts if size <= cut)
        started_before_next = [
            w for i, k, w in effects if k == "tool" and log.durable(i) <= synced
        ]  # the tools that may have run before the sync after `synced`
        report, ran = _recover(server, data[:cut], tmp_path / f"cut-{cut}", workspace)
        assert ran == [], f"a recovery at byte {cut} ran {ran} again"
        state = load_session(tmp_path / f"cut-{cut}" / "nb.agent.jsonl")
        assert state.open_operation is None
        calls = {i.tool_call_id: i for i in state.tool_intents.values()}
        for spot in started_before_next:
            intent = calls[f"call_{spot}"]  # its intent survived the cut
            assert intent.status != "pending"
        if report is not None:
            assert all(i.tool.name == "mark" for i in report.interrupted)
            assert all(i.tool.name == "read_file" for i in report.replayed)
    # 3. A cut just after each mark's intent synced, its result unsynced: the mark is
    # reported interrupted (it may have happened), never run again.
    for spot in ("a", "b"):
        end = next(
            end
            for end, tx in _transactions(data)
            if any(fact.get("record", {}).get("toolCallId") == f"call_{spot}" for fact in tx)
        )
        assert end in cuts
        report, ran = _recover(server, data[:end], tmp_path / f"lost-{spot}", workspace)
        assert ran == [] and report is not None
        assert [i.tool_call_id for i in report.interrupted] == [f"call_{spot}"]
    assert len(server.requests) == 4  # no recovery asked the model anything


def _recover(
    server: OpenAIServer, data: bytes, where: Path, workspace: Path
) -> tuple[RecoveryReport | None, list[str]]:
    """Open a copy of `data` in a new directory as a kernel does, and recover it: the
    report, and the marks that ran again."""
    where.mkdir()
    path = where / "nb.agent.jsonl"
    path.write_bytes(data)
    ran: list[Event] = []
    with _open(path, workspace) as store:
        loop, provider = _loop(store, server, workspace, ran, Mark())
        try:
            report = loop.recover()
        finally:
            loop.close()
            provider.close()
    return report, [str(what) for kind, what in ran if kind == "tool"]


# ---------------------------------------------------------------- the store alone


@pytest.fixture
def power(tmp_path: Path, workspace: Path) -> Iterator[SessionStore]:
    with _open(tmp_path / "nb.agent.jsonl", workspace) as store:
        yield store


def test_an_unsynced_commit_is_in_the_file_when_it_returns_and_synced_at_close(
    power: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SyncLog(power.path, monkeypatch)
    run = Run(environment=power.header.environmentIdentity)
    power.commit(run.start("Read it"))
    power.commit(run.attempt())
    synced = len(log.syncs())
    power.commit(run.answer("Nothing to do."))  # what came of the request: not synced
    assert len(log.syncs()) == synced
    # Written at once (it survives kill -9 as in process mode): another reader sees it.
    assert load_session(power.path).last_seq == power.load().last_seq
    power.close()
    assert log.syncs()[synced:] == [power.path.stat().st_size]  # close synced it


def test_a_kernel_record_rides_to_the_disk_with_the_run_that_follows_it(
    power: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `kernelOpened` precedes no effect (docs/spec.md §9): not synced alone, but by the
    next transaction that precedes one."""
    log = SyncLog(power.path, monkeypatch)
    opened = f.NewFact(f.KernelOpened(pid=1, host="h", startedAt=0, kernelId=None, notebook=None))
    power.commit([opened])
    assert log.syncs() == []
    power.commit(Run(environment=power.header.environmentIdentity).start("Read it"))
    assert log.syncs() == [power.path.stat().st_size]


CHILD = """
import sys, time
from tiny_agent_nb.session import HeaderInit, SessionStore
from helpers.scenario import Run
here = sys.argv[2]
init = HeaderInit(cwd=here, provider="p", model="m", environment_identity=here)
store = SessionStore.open(sys.argv[1], create=init, durability="power")
run = Run(environment=here)
store.commit(run.start("Read it"))
store.commit(run.attempt())
store.commit(run.answer("Nothing to do."))
print("committed", flush=True)
time.sleep(60)
"""


def test_an_unsynced_commit_acknowledged_before_kill_9_is_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nb.agent.jsonl"
    tests = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == "committed\n"
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
    # The answer was never synced, and the writer is gone: the kernel still has it.
    assert [a.status for a in load_session(path).attempts.values()] == ["settled"]


def test_a_failed_sync_of_an_intent_cuts_the_intent_and_keeps_the_answer_before_it(
    power: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Run(environment=power.header.environmentIdentity)
    power.commit(run.start("Read it"))
    power.commit(run.attempt())
    power.commit(run.answer(None, [("call_1", "read_file", {"path": "README.md"})]))
    answered = power.path.stat().st_size

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(SessionWriteError, match="Input/output error"):
        power.commit([run.intent("call_1", READ_FILE, {"path": "README.md"})])
    assert power.path.stat().st_size == answered  # the intent is gone: the tool won't run
    assert power.load().tool_intents == {}
    with pytest.raises(SessionError, match="whether the last ones reached the disk"):
        power.close()  # the answer's sync is still pending, and fails again
    assert power.closed
    monkeypatch.undo()
    SessionStore.open(power.path).close()  # the file was released
