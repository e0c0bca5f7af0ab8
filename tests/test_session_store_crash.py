"""SIGKILL a real writer process at every kind of moment, one file after another
(docs/session-format.md §5, §6).

A child (`children/commit_loop.py`) commits realistic transactions and acknowledges each
one on a pipe once `commit()` has returned. The parent SIGKILLs it at each moment of
KILL_POINTS once per round: right after its n-th ack (n = 1..12: the reconciling commit,
a run's start, attempts, answers, intents, results), at spread delays into a 1-4 MB
transaction being validated, encoded and written, and at spread delays after it opened
the file. Each kill is a new child on the same file (a new file every KILLS_PER_FILE), so
repairs pile on repairs. Kills land inside a write by chance; a shard whose kills left
no torn tail (a loaded machine makes it rarer) ends with a writer whose large write stops
halfway (the child's `stall` mode) and is SIGKILLed there, so the repair of a torn tail
is exercised on every run:

- `load_session` succeeds, its lastSeq is at least the highest acknowledged seq, and that
  seq holds the acknowledged fact: an acknowledged commit is never lost;
- seqs run 1..lastSeq without a gap (the loader checks; we check again);
- the bytes after the last LF (a torn tail) are exactly what the reader says it ignored.

The next child reopens the same file (a writer left it mid-write: torn-tail repair on
open), must report that it cut exactly that tail and sees exactly the lastSeq the reader
saw, closes the operation the dead writer left open, and continues.

Children are forked by a multiprocessing forkserver (started with sys.executable) that has
already imported the store, so a kill costs milliseconds instead of a fresh interpreter's
~0.2 s of imports. Each child is still its own process that opens the file itself, holds
its own descriptor and flock, and dies by a real SIGKILL.

A round kills at each moment once: the 240 kills at random moments this loop used to
make repeated them (and left one torn tail per 60 kills, which the stalled write leaves
for certain).
Seed: TINY_AGENT_CRASH_SEED (default below), for the order of the moments and the
children's transactions. Rounds: TINY_AGENT_CRASH_ROUNDS (default 1, more for a soak),
in SHARDS independent tests (each its own seed stream, files and torn tails), so a
parallel run spreads them over workers.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import statistics
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

from tiny_agent_nb.session import HeaderInit, SessionStore, load_session

from children import commit_loop

SEED = int(os.environ.get("TINY_AGENT_CRASH_SEED", "20240917"))
ROUNDS = int(os.environ.get("TINY_AGENT_CRASH_ROUNDS", "1"))
# The moments of one round, each killed once (shuffled): (strategy, n-th ack or fraction
# of the delay range).
SPREAD = 6  # delays into a large write, and after opening, at 0/6 .. 5/6 of their range
KILL_POINTS = (
    [("after_ack", n) for n in range(1, 13)]
    + [("during_big_write", i / SPREAD) for i in range(SPREAD)]
    + [("random_delay", i / SPREAD) for i in range(SPREAD)]
)
# Children reopen one file this many times before a new file is started: enough to pile
# repair on repair, few enough that reopening (a full reduction) stays cheap.
KILLS_PER_FILE = 12
BIG_SHARE = 0.4  # share of the other children that write 1-4 MB tool results too
SHARDS = 2
# Per shard: the whole loop sees at least SHARDS torn tails. A stalled write leaves one
# for certain; the margin is for a kill that SIGKILL-races the stall.
MIN_TORN_TAILS = 1
MAX_EXTRA_KILLS = 3
TIMEOUT_S = 30.0


@dataclass
class CrashLoop:
    ctx: ForkServerContext
    directory: Path
    rng: random.Random
    shard: int = 0
    path: Path = Path()
    kills: int = 0
    kills_on_file: int = 0
    last_seq: int = 0  # what the reader saw after the last kill
    torn_tail: int = 0  # bytes after the last LF after the last kill
    torn_tails: list[int] = field(default_factory=list)
    big_commit_s: list[float] = field(default_factory=lambda: [0.01])  # observed durations
    strategies: dict[str, int] = field(default_factory=dict)

    def fail(self, what: str) -> str:
        return (
            f"seed {SEED} (TINY_AGENT_CRASH_SEED) shard {self.shard}, kill {self.kills} "
            f"({self.path.name}): {what}"
        )

    def run(self, points: list[tuple[str, float]]) -> None:
        """Kill a writer at each of `points`, then at stalled writes until a torn tail
        was left."""
        stalls = [("stalled_write", 0.0)] * MAX_EXTRA_KILLS
        for n, point in enumerate(itertools.chain(points, stalls)):
            if n >= len(points) and len(self.torn_tails) >= MIN_TORN_TAILS:
                break
            if self.kills_on_file == 0:
                self.path = self.directory / f"notebook.{self.kills}.agent.jsonl"
                self.last_seq = self.torn_tail = 0
            self.one_kill(*point)
            if self.kills_on_file == KILLS_PER_FILE:
                self.reopen_in_parent()
        if self.kills_on_file:
            self.reopen_in_parent()

    def one_kill(self, strategy: str, at: float) -> None:
        """A new writer on the file, SIGKILLed at `strategy`'s moment `at` (the n-th ack,
        or the fraction of its delay range)."""
        big = strategy == "during_big_write" or self.rng.random() < BIG_SHARE
        mode = "stall" if strategy == "stalled_write" else "big" if big else "small"
        acks_in, acks_out = self.ctx.Pipe(duplex=False)
        child = self.ctx.Process(
            target=commit_loop.write_session,
            args=(str(self.path), self.rng.randrange(2**32), mode, acks_out),
            daemon=True,
        )
        child.start()
        acks_out.close()  # the child holds the only write end: EOF once it is dead
        assert child.pid is not None
        try:
            lines = self.drive_and_kill(child, child.pid, acks_in, strategy, at)
        finally:
            if child.exitcode is None:
                os.kill(child.pid, signal.SIGKILL)
            child.join(TIMEOUT_S)
            acks_in.close()
        # Dying any other way (an exception, exit) would also stop the acks.
        assert child.exitcode == -signal.SIGKILL, self.fail(f"child exited {child.exitcode}")
        self.kills += 1
        self.kills_on_file += 1
        self.check_file([line for line in lines if line.startswith("ack ")])

    def drive_and_kill(
        self, child: BaseProcess, pid: int, acks: Connection, strategy: str, at: float
    ) -> list[str]:
        def next_line(deadline: float) -> str | None:
            if not acks.poll(max(deadline - time.monotonic(), 0)):
                return None
            try:
                return acks.recv_bytes().decode()
            except EOFError:
                return None

        ready = next_line(time.monotonic() + TIMEOUT_S)
        assert ready is not None and ready.startswith("ready "), self.fail(f"no ready: {ready}")
        _, seq, repaired, created = ready.split()
        # The writer saw exactly what the reader saw and cut exactly the torn tail.
        assert int(created) == (self.kills_on_file == 0), self.fail(ready)
        assert int(seq) == self.last_seq, self.fail(f"{ready}, reader saw {self.last_seq}")
        assert int(repaired) == self.torn_tail, self.fail(f"{ready}, torn tail {self.torn_tail}")

        self.strategies[strategy] = self.strategies.get(strategy, 0) + 1
        lines: list[str] = []
        deadline = time.monotonic() + TIMEOUT_S
        if strategy == "after_ack":
            wanted = int(at)
            while sum(line.startswith("ack ") for line in lines) < wanted:
                line = next_line(deadline)
                assert line is not None, self.fail(f"only {lines} before the deadline")
                lines.append(line)
        elif strategy == "stalled_write":
            while not (lines and lines[-1].startswith("stalled ")):
                line = next_line(deadline)
                assert line is not None, self.fail(f"no stalled write after {lines[-3:]}")
                lines.append(line)
        else:
            if strategy == "during_big_write":
                while not (lines and lines[-1].startswith("big ")):
                    line = next_line(deadline)
                    assert line is not None, self.fail(f"no large commit after {lines[-3:]}")
                    lines.append(line)
                # Somewhere in validating, encoding or writing the large transaction (as
                # long as large commits took lately on this machine).
                typical = statistics.median(self.big_commit_s[-15:])
                kill_at = time.monotonic() + self.spread(at) * 1.2 * typical
            else:
                kill_at = time.monotonic() + self.spread(at) * 0.025
            while (line := next_line(kill_at)) is not None:
                lines.append(line)
        os.kill(pid, signal.SIGKILL)
        child.join(TIMEOUT_S)
        # Acks written before the kill are still in the pipe.
        while (line := next_line(time.monotonic() + TIMEOUT_S)) is not None:
            lines.append(line)
        for before, after in itertools.pairwise(lines):
            if before.startswith("big ") and after.startswith("ack "):
                self.big_commit_s.append(int(after.split()[3]) / 1e6)
        return lines

    def spread(self, at: float) -> float:
        """A random moment in the SPREAD-th of the range that starts at fraction `at`."""
        return at + self.rng.uniform(0.0, 1.0 / SPREAD)

    def check_file(self, acks: list[str]) -> None:
        raw = self.path.read_bytes()
        torn = len(raw) - (raw.rfind(b"\n") + 1)
        state = load_session(self.path)  # must not raise: a kill never corrupts the file
        assert state.torn_tail_bytes == torn, self.fail(f"reader ignored {state.torn_tail_bytes}")
        facts = state.facts  # built from the file on each access: once here
        seqs = [fact.seq for fact in facts]
        assert seqs == list(range(1, state.last_seq + 1)), self.fail("seqs not contiguous")
        assert state.last_seq >= self.last_seq, self.fail("committed facts disappeared")
        if acks:
            _, seq, acked_id, _ = acks[-1].split()
            acked_seq = int(seq)
            assert state.last_seq >= acked_seq, self.fail(
                f"acknowledged seq {acked_seq} lost: the file ends at seq {state.last_seq}"
            )
            assert facts[acked_seq - 1].id == acked_id, self.fail(
                f"seq {acked_seq} is not the acknowledged fact {acked_id}"
            )
        if torn:
            self.torn_tails.append(torn)
        self.last_seq = state.last_seq
        self.torn_tail = torn

    def reopen_in_parent(self) -> None:
        """The parent is the last writer of a file: it repairs it and sees every commit."""
        self.kills_on_file = 0
        here = str(self.directory)
        init = HeaderInit(
            cwd=here, provider="openrouter", model="test/model", environment_identity=here
        )
        with SessionStore.open(self.path, create=init) as store:
            assert store.repaired_tail_bytes == self.torn_tail, self.fail("parent repair")
            assert self.path.read_bytes().endswith(b"\n"), self.fail("tail not cut")
            assert store.load().last_seq == self.last_seq, self.fail("parent reopen")


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_sigkilled_writers_never_lose_acknowledged_commits(
    tmp_path: Path, forkserver: ForkServerContext, shard: int
) -> None:
    rng = random.Random(f"{SEED}/{shard}")
    points = [point for _ in range(ROUNDS) for point in rng.sample(KILL_POINTS, len(KILL_POINTS))]
    loop = CrashLoop(forkserver, tmp_path, rng, shard)
    started = time.monotonic()
    loop.run(points)

    report = (
        f"seed {SEED} shard {shard}: {loop.kills} SIGKILLs in {time.monotonic() - started:.1f}s, "
        f"{len(loop.torn_tails)} left a torn tail "
        f"(sizes {sorted(loop.torn_tails)}), kills by strategy {loop.strategies}"
    )
    print(report)
    assert loop.kills >= len(points), report
    assert loop.torn_tails, "no kill landed inside a write: torn-tail repair untested. " + report
    assert loop.last_seq > 0, report
