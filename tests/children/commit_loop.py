"""Writer child of tests/test_session_store_crash.py: opens a session and commits until killed.

    python commit_loop.py PATH SEED MODE        (MODE: small | big; acks on stdout)

The crash test starts `write_session` in processes forked by a multiprocessing
forkserver that has already imported this module (a fresh interpreter spends ~0.2 s
importing pydantic; hundreds of kills cannot afford that), with acks on a pipe.

It opens PATH the way a kernel does (creating it the first time, repairing a torn tail
left by the previous, SIGKILLed writer), finishes an operation that writer left open
the way the planner would (interrupted), then drives realistic runs forever. Payloads
range from a few bytes to ~8 KB; in `big` mode some tool results are 256 KB-1 MB so
that a kill often lands inside the one `os.write` of a transaction. In `stall` mode (a
`big` writer) the first large transaction's write stops halfway: the child writes its first
half, says so and waits for the SIGKILL, so a torn tail is left for certain rather than by
the chance of a kill's timing (which a loaded machine can make rare).

Protocol, each line one write to the pipe (atomic, so never half-read):

    ready <lastSeq> <repairedTailBytes> <created 0|1>   after open
    ack <lastSeq> <id of the last fact> <µs in commit>  after every commit() returned
    big <seq>                                          just before a large commit
    stalled <bytes>                                    (stall mode) half a write is on disk
"""

from __future__ import annotations

import base64
import os
import random
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for scenario

from tiny_agent_nb.agent import plan_recovery
from tiny_agent_nb.session import HeaderInit, NewFact, SessionStore
from tiny_agent_nb.session import facts as f

from helpers.scenario import BASH, READ_FILE, Run

# The parent kills us long before this; it only stops an orphan if the parent died.
LIFETIME_S = 120.0
# Text that needs JSON escaping and multi-byte UTF-8, so framing is exercised too.
_CHUNK = 'def f(x):\n\treturn "quoted" \\ path é 中文 🙂 {"k": [1, 2]}\r\n'
CORPUS = _CHUNK * (8192 // len(_CHUNK) + 2)
# Cheap to encode and parse (no escapes), so big lines cost the write, not the JSON.
BIG_BLOB = "iVBORw0KGgoAAAANSUhEUgAA" + base64.b64encode(bytes(range(256)) * 12_288).decode()


def emit_stdout(line: str) -> None:
    os.write(1, line.encode() + b"\n")


class Writer:
    def __init__(
        self, store: SessionStore, rng: random.Random, mode: str, emit: Callable[[str], None]
    ) -> None:
        self.store = store
        self.emit = emit
        self.rng = rng
        self.mode = mode
        self.environment = store.header.environmentIdentity
        self.last_seq = store.load().last_seq

    def commit(self, txn: list[NewFact]) -> None:
        started = time.perf_counter_ns()
        committed = self.store.commit(txn)
        micros = (time.perf_counter_ns() - started) // 1000
        self.last_seq = committed[-1].seq
        self.emit(f"ack {committed[-1].seq} {committed[-1].id} {micros}")

    def text(self) -> str:
        """Mostly small, sometimes up to ~8 KB, like real prompts and tool output."""
        r = self.rng.random()
        if r < 0.5:
            size = self.rng.randint(0, 64)
        elif r < 0.8:
            size = self.rng.randint(64, 1024)
        else:
            size = self.rng.randint(1024, 8192)
        start = self.rng.randrange(len(_CHUNK))
        return CORPUS[start : start + size]

    def tool_output(self) -> tuple[str, bool]:
        if self.mode == "big" and self.rng.random() < 0.4:
            size = self.rng.randint(1024 * 1024, 4 * 1024 * 1024)
            return BIG_BLOB[:size], True
        return self.text(), False

    def reconcile(self) -> None:
        """Close what the killed writer left open, as the planner does (docs/spec.md §2.1)."""
        plan = plan_recovery(self.store.load(), {}, self.environment)
        if plan is None:
            return
        txn = plan.closing_transaction()
        self.commit(txn)

    def run(self) -> None:
        rng = self.rng
        run = Run(environment=self.environment)
        self.commit(run.start(self.text()))
        steps = rng.randint(1, 3)
        for step in range(steps):
            self.commit(run.attempt())
            if rng.random() < 0.15:
                assert run.attempt_id is not None
                failed = f.attempt_failed(
                    run.attempt_id, kind="http", message="429", retryable=True, status=429
                )
                self.commit([failed])
                self.commit(run.attempt(2))
            if step == steps - 1:
                self.commit(run.answer(self.text()))
                break
            calls = self.tool_calls(step)
            self.commit(run.answer(self.text() or None, calls))
            tools = {"read_file": READ_FILE, "bash": BASH}
            intents = [run.intent(cid, tools[name], args) for cid, name, args in calls]
            if rng.random() < 0.5:
                self.commit(intents)  # several intents in one transaction
            else:
                for intent in intents:
                    self.commit([intent])
            for intent in intents:
                content, big = self.tool_output()
                txn = [Run.result(intent, content, "completed" if rng.random() < 0.8 else "error")]
                if rng.random() < 0.3:
                    txn.append(f.usage(tool_started_id=intent.id, cost=0.0001))
                if big:
                    self.emit(f"big {self.last_seq + 1}")
                self.commit(txn)
        self.commit(run.finish())

    def tool_calls(self, step: int) -> list[tuple[str, str, dict[str, Any]]]:
        calls: list[tuple[str, str, dict[str, Any]]] = []
        for k in range(self.rng.randint(1, 3)):
            if self.rng.random() < 0.5:
                calls.append((f"call_{step}_{k}", "read_file", {"path": f"src/m{k}.py"}))
            else:
                calls.append((f"call_{step}_{k}", "bash", {"command": f"pytest -k t{k}"}))
        return calls


def stall_large_writes(emit: Callable[[str], None]) -> None:
    """Make this process's large writes stop halfway (it is about to be SIGKILLed).

    The store writes a transaction with `os.write` (session/_files.py); only writes of over
    256 KB (a large tool result's transaction) stall, so the header, the repair on open and
    small commits are written as they always are. Pipes (the acks) do not go through
    `os.write` here: multiprocessing's Connection bound its own at import.
    """
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        if len(data) <= 256 * 1024:
            return real_write(fd, data)
        half = real_write(fd, memoryview(data)[: len(data) // 2])
        emit(f"stalled {half}")
        time.sleep(LIFETIME_S)
        sys.exit(3)

    os.write = write


def write_session(path: str, seed: int, mode: str, acks: Connection | None = None) -> None:
    """Open (create / repair), reconcile, then commit runs until killed."""
    emit = emit_stdout if acks is None else (lambda line: acks.send_bytes(line.encode()))
    if mode == "stall":
        stall_large_writes(emit)
        mode = "big"
    here = str(Path(path).parent)
    init = HeaderInit(
        cwd=here, provider="openrouter", model="test/model", environment_identity=here
    )
    store = SessionStore.open(path, create=init)
    emit(f"ready {store.load().last_seq} {store.repaired_tail_bytes} {int(store.created)}")
    writer = Writer(store, random.Random(seed), mode, emit)
    writer.reconcile()
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        writer.run()
    sys.exit(3)


if __name__ == "__main__":
    write_session(sys.argv[1], int(sys.argv[2]), sys.argv[3])
