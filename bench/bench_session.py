"""Benchmark the session store against a raw JSONL baseline measured in the same run.

    python bench/bench_session.py [--sizes 1000,10000,100000] [--quick] [--profile]

What is timed (docs/session-format.md §1-§8), each next to the cheapest code that writes or
reads the same bytes without the store:

1. commit throughput: `SessionStore.commit` of pre-built transactions (durability
   "process", full validation) vs `json.dumps` of the committed facts' dicts
   (`model_dump(mode="json")`, computed before timing) + one `os.write` per transaction
   to an O_APPEND descriptor.
2. flatness: time of the last 1k commits / time of the first 1k commits of the largest
   run (fastest window over the repeats, each); a commit whose cost grows with history
   shows up here.
   Also (info): the same commits with each transaction's payload built just before it
   is committed, as the agent loop does, so that the heap, and with it the cyclic GC's
   work, grows with the session as it does in a kernel.
3. resume: `load_session` of the largest file vs reading it + `json.loads` of every
   line; `SessionStore.open` (lock + load + torn-tail repair) against the same baseline.
4. power: commits with durability "power" vs a write loop that fsyncs after the same
   transactions (those that precede an effect, docs/session-format.md §6.2), interleaved
   transaction by transaction (both sides see the disk's fsync latency of the same
   moment); the ratio is the median over rounds of store time / raw time.

The facts are ~1 KB on average and come from complete agent runs (user entry +
runStarted, then stepAttempt / assistant entry with tool calls + usage / toolStarted /
~2 KB tool result ..., the odd failed attempt, operationFinished).

The machine this was written for has 2 cores shared with other work. Store and baseline
runs are interleaved (alternating which goes first); the table shows the fastest run of
each side, since noise only ever adds time, and the second table shows min / median /
max of every measurement, the per-transaction median and the time spent in the cyclic
GC (measured with `gc.callbacks`; cProfile charges GC pauses to whatever allocated).

It is a report, not a test: missing a target still exits 0.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
from _report import (  # bench/ is on sys.path when a script here runs
    GcClock,
    Row,
    now,
    print_rows,
    print_spreads,
    revision,
    spread,
)

from tiny_agent_nb.session import (
    AssistantEntry,
    CompactionEntry,
    HeaderInit,
    NewFact,
    SessionStore,
    ToolCall,
    ToolIdentity,
    ToolResultEntry,
    ToolStarted,
    UserEntry,
    load_session,
    new_id,
)
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.session._models import Usage

MODEL = "anthropic/claude-sonnet-4"
DIGEST = "sha256:" + "3f" * 32
COMPACT = (",", ":")
TORN_TAIL = b'{"kind":"entry","seq":'  # a writer killed mid-append leaves this behind
ENTRY = (UserEntry, AssistantEntry, ToolResultEntry, CompactionEntry)
TOOLS = (
    ToolIdentity(name="read_file", version="1", source="builtin"),
    ToolIdentity(name="bash", version="1", source="builtin"),
    ToolIdentity(name="grep", version="2", source="mcp:ripgrep"),
)
WORDS = " ".join(
    (
        "the parser fails when the input ends with a trailing comma so we should check",
        "tokenize before calling parse_expr and report the line number instead of crashing",
        "résumé naïve 数据 Ünïcode test_parse.py assert expected actual None self config value",
        "return import from def class raise ValueError KeyError path offset limit timeout",
    )
).split(" ")


# ---------------------------------------------------------------- workload


class Filler:
    """Deterministic text shaped like model prose and tool output.

    Tool output has quotes, backslashes, tabs, newlines and non-ASCII, so both encoders
    do real escaping work. Texts come from small pools: encoders do not cache, and
    building 100k unique strings would only slow the setup down.
    """

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._prose: dict[int, list[str]] = {}
        self._output: dict[int, list[str]] = {}

    def prose(self, size: int) -> str:
        if size not in self._prose:
            self._prose[size] = [self._make_prose(size) for _ in range(32)]
        return self._rng.choice(self._prose[size])

    def output(self, size: int) -> str:
        if size not in self._output:
            self._output[size] = [self._make_output(size) for _ in range(32)]
        return self._rng.choice(self._output[size])

    def _make_prose(self, size: int) -> str:
        words: list[str] = []
        length = 0
        while length < size:
            word = self._rng.choice(WORDS)
            words.append(word)
            length += len(word) + 1
        return " ".join(words)[:size]

    def _make_output(self, size: int) -> str:
        lines: list[str] = []
        length = 0
        while length < size:
            n = self._rng.randrange(1, 400)
            words = " ".join(self._rng.choice(WORDS) for _ in range(self._rng.randrange(2, 9)))
            line = f'{n:4d}\t    value = parse("{words}")  # C:\\tmp\\{n}.py'
            lines.append(line)
            length += len(line) + 1
        return "\n".join(lines)[:size]


def _tool_call(rng: random.Random, step: int, index: int) -> tuple[str, ToolIdentity, dict]:
    tool = TOOLS[rng.randrange(len(TOOLS))]
    n = rng.randrange(1000)
    if tool.name == "read_file":
        args: dict[str, Any] = {"path": f"src/pkg/module_{n}.py", "offset": 0, "limit": 200}
    elif tool.name == "bash":
        args = {"command": f"python -m pytest -x tests/test_parse_{n}.py -q 2>&1 | tail -n 40"}
        args["timeout"] = 120
    else:
        args = {"pattern": "def parse_expr", "path": "src", "glob": "*.py", "context": 3}
    return f"call_{step}_{index}_{rng.randrange(1 << 40):010x}", tool, args


def one_run(rng: random.Random, text: Filler, environment: str) -> Iterator[list[NewFact]]:
    """The transactions of one operation, in the order the agent loop commits them."""
    operation_id = new_id()
    entry_id = new_id()
    yield [f.user_message(text.prose(800), id=entry_id), f.run_started(operation_id, entry_id)]
    steps = rng.randint(3, 12)
    for step in range(1, steps + 1):
        attempt = 1
        while True:
            attempt_id = new_id()
            yield [
                f.NewFact(
                    f.StepAttempt(
                        operationId=operation_id,
                        step=step,
                        attempt=attempt,
                        provider="openrouter",
                        model=MODEL,
                        configurationDigest=DIGEST,
                    ),
                    attempt_id,
                )
            ]
            if attempt < 3 and rng.random() < 0.04:
                yield [
                    f.attempt_failed(
                        attempt_id,
                        kind="http",
                        message="429 Too Many Requests: rate limited upstream, retry later",
                        retryable=True,
                        status=429,
                    )
                ]
                attempt += 1
                continue
            break
        tokens = {"input_tokens": 1200 * step, "output_tokens": 180, "reasoning_tokens": 64}
        spend = f.usage(attempt_id=attempt_id, cost=0.0042, cached_input_tokens=900, **tokens)
        if step == steps:
            final = f.assistant_message(
                attempt_id, content=text.prose(1200), reasoning=text.prose(400)
            )
            yield [final, spend]
            break
        calls = [_tool_call(rng, step, i) for i in range(1 if rng.random() < 0.8 else 2)]
        answer = f.assistant_message(
            attempt_id,
            content=None,
            reasoning=text.prose(900),
            tool_calls=[ToolCall(id=cid, name=tool.name, arguments=a) for cid, tool, a in calls],
            finish_reason="tool_calls",
        )
        yield [answer, spend]
        for call_id, tool, args in calls:
            intent = f.tool_started(
                operation_id,
                attempt_id,
                call_id,
                tool=tool,
                arguments=args,
                replay_policy="safeRead" if tool.name == "read_file" else "never",
                environment_identity=environment,
            )
            yield [intent]
            body = intent.body
            assert isinstance(body, ToolStarted) and intent.id is not None
            yield [
                f.tool_result(
                    tool_started_id=intent.id,
                    result_entry_id=body.resultEntryId,
                    tool_call_id=call_id,
                    content=text.output(2000),
                    outcome="completed",
                )
            ]
    yield [f.NewFact(f.OperationFinished(operationId=operation_id, outcome="completed"))]


def iter_transactions(n_facts: int, environment: str, seed: int = 1) -> Iterator[list[NewFact]]:
    """Exactly `n_facts` facts of whole runs; the last run may be left open.

    The last transaction may lose its trailing facts ([user, runStarted] -> [user],
    [assistant, usage] -> [assistant]), which is still a valid transaction.
    """
    rng = random.Random(seed)
    text = Filler(rng)
    count = 0
    while count < n_facts:
        for whole in one_run(rng, text, environment):
            tx = whole[: n_facts - count]
            count += len(tx)
            yield tx
            if count >= n_facts:
                return


def build_transactions(n_facts: int, environment: str, seed: int = 1) -> list[list[NewFact]]:
    return list(iter_transactions(n_facts, environment, seed))


def raw_envelopes(tx: list[NewFact], seq: int) -> tuple[Any, int]:
    """What the store would write for `tx`, as plain dicts (for the incremental baseline)."""
    at = time.time_ns() // 1_000_000
    dumped = []
    for new in tx:
        seq += 1
        body = new.body
        kind = (
            "usage" if isinstance(body, Usage) else "entry" if isinstance(body, ENTRY) else "record"
        )
        fact_id = new.id if new.id is not None else new_id()
        envelope = {"kind": kind, "seq": seq, "id": fact_id, "at": at}
        envelope[kind] = body.model_dump(mode="json")
        dumped.append(envelope)
    return (dumped[0] if len(dumped) == 1 else dumped), seq


def fact_count(transactions: Sequence[Sequence[object]]) -> int:
    return sum(len(tx) for tx in transactions)


# ---------------------------------------------------------------- timing helpers


@dataclass
class Bench:
    workdir: Path
    environment: str
    serial: int = 0

    def fresh_path(self, stem: str) -> Path:
        self.serial += 1
        return self.workdir / f"{stem}-{self.serial}.jsonl"

    def open_store(self, path: Path, durability: str = "process") -> SessionStore:
        create = HeaderInit(
            cwd=self.environment,
            provider="openrouter",
            model=MODEL,
            environment_identity=self.environment,
        )
        return SessionStore.open(path, create=create, durability=durability)  # type: ignore[arg-type]


@dataclass
class CommitRun:
    seconds: float
    deltas: list[float]  # per-transaction wall time, in commit order
    size: int  # bytes of the file afterwards
    gc_seconds: float  # of `seconds`, spent in the cyclic GC


def store_commits(
    bench: Bench, transactions: Sequence[list[NewFact]], durability: str
) -> CommitRun:
    path = bench.fresh_path(f"store-{durability}")
    marks = [0.0] * len(transactions)
    store = bench.open_store(path, durability)
    commit, perf = store.commit, time.perf_counter
    with GcClock() as gc_clock:
        start = perf()
        for i, tx in enumerate(transactions):
            commit(tx)
            marks[i] = perf()
    store.close()
    del store, commit
    size = path.stat().st_size
    run = CommitRun(marks[-1] - start, _deltas(start, marks), size, gc_clock.seconds)
    path.unlink()
    return run


def raw_commits(path: Path, header: bytes, lines_json: bytes, fsync: bool) -> CommitRun:
    """The baseline: json.dumps + one os.write per transaction (+ fsync in power mode)."""
    lines = json.loads(lines_json)  # the dicts exist only while the baseline runs
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    os.write(fd, header)
    if fsync:
        os.fsync(fd)
    marks = [0.0] * len(lines)
    dumps, write, sync, perf = json.dumps, os.write, os.fsync, time.perf_counter
    with GcClock() as gc_clock:
        start = perf()
        for i, obj in enumerate(lines):
            write(fd, (dumps(obj, separators=COMPACT, ensure_ascii=False) + "\n").encode())
            if fsync:
                sync(fd)
            marks[i] = perf()
    os.close(fd)
    del lines
    size = path.stat().st_size
    run = CommitRun(marks[-1] - start, _deltas(start, marks), size, gc_clock.seconds)
    path.unlink()
    return run


def _deltas(start: float, marks: list[float]) -> list[float]:
    return [b - a for a, b in zip([start, *marks[:-1]], marks, strict=True)]


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, of which cyclic GC) of one call; its result is dropped untimed."""
    with GcClock() as gc_clock:
        start = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - start
    del result
    return seconds, gc_clock.seconds


def raw_load(path: Path) -> list[Any]:
    data = path.read_bytes()
    return [json.loads(line) for line in data.split(b"\n") if line]


# ---------------------------------------------------------------- report


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    spreads: list[tuple[str, str, str]] = field(default_factory=list)

    def addspread(
        self, name: str, ours: list[float], raw: list[float], unit: Callable[[float], str] = ms
    ) -> None:
        self.spreads.append((name, spread(ours, unit), spread(raw, unit)))

    def print(self) -> None:
        print_rows(self.rows)
        print()
        print_spreads(self.spreads)


def label(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else f"{n:,}"


def median_of(runs: list[CommitRun], part: slice = slice(None)) -> float:
    """Median over runs of the median per-transaction time (robust to preemption)."""
    return statistics.median(statistics.median(r.deltas[part]) for r in runs)


# ---------------------------------------------------------------- measurements


@dataclass
class Prepared:
    transactions: list[list[NewFact]]
    lines_json: bytes  # a JSON list: per transaction, what json.dumps writes (dict or list)
    header: bytes
    facts: int
    tx_count: int
    file_path: Path  # the file of the warm-up run, kept for the resume measurements


def prepare(bench: Bench, n_facts: int, seed: int = 1) -> Prepared:
    """Build the transactions, commit them once (warm-up), and derive the raw dicts."""
    transactions = build_transactions(n_facts, bench.environment, seed)
    path = bench.fresh_path(f"session-{n_facts}")
    with bench.open_store(path) as store:
        committed = [store.commit(tx) for tx in transactions]
    lines: list[Any] = []
    for facts in committed:
        dumped = [fact.model_dump(mode="json") for fact in facts]
        lines.append(dumped[0] if len(dumped) == 1 else dumped)
    header = path.read_bytes().partition(b"\n")[0] + b"\n"
    return Prepared(
        transactions,
        json.dumps(lines).encode(),
        header,
        fact_count(transactions),
        len(transactions),
        path,
    )


def measure_commits(
    bench: Bench, prep: Prepared, repeats: int, durability: str = "process"
) -> tuple[list[CommitRun], list[CommitRun]]:
    ours: list[CommitRun] = []
    raw: list[CommitRun] = []
    fsync = durability == "power"
    for round_ in range(repeats):
        # Interleaved, alternating who goes first: a noisy neighbour hits both sides alike.
        if round_ % 2:
            raw.append(raw_commits(bench.fresh_path("raw"), prep.header, prep.lines_json, fsync))
        ours.append(store_commits(bench, prep.transactions, durability))
        if not round_ % 2:
            raw.append(raw_commits(bench.fresh_path("raw"), prep.header, prep.lines_json, fsync))
    return ours, raw


def commit_rows(prep: Prepared, ours: list[CommitRun], raw: list[CommitRun], report: Report) -> Row:
    t_ours = min(r.seconds for r in ours)
    t_raw = min(r.seconds for r in raw)
    n_tx = prep.tx_count
    name = f"commit {label(prep.facts)} facts"
    report.addspread(name, [r.seconds for r in ours], [r.seconds for r in raw])
    report.addspread(
        f"{name}, per-tx p50",
        [statistics.median(r.deltas) for r in ours],
        [statistics.median(r.deltas) for r in raw],
        us,
    )
    report.addspread(
        f"{name}, of which cyclic GC",
        [r.gc_seconds for r in ours],
        [r.gc_seconds for r in raw],
    )
    report.addspread(
        f"{name}, slowest single tx",
        [max(r.deltas) for r in ours],
        [max(r.deltas) for r in raw],
    )
    return Row(
        f"commit {label(prep.facts)} facts ({n_tx:,} tx, process)",
        f"{ms(t_ours)} · {prep.facts / t_ours:,.0f} facts/s · p50 {us(median_of(ours))}/tx",
        f"{ms(t_raw)} · {prep.facts / t_raw:,.0f} facts/s · p50 {us(median_of(raw))}/tx",
        t_ours / t_raw,
        3,
    )


def flatness_row(prep: Prepared, ours: list[CommitRun], raw: list[CommitRun]) -> Row:
    window = min(1000, prep.tx_count // 4)

    def ratio(runs: list[CommitRun]) -> float:
        # Fastest window of any run over fastest window of any run, as for the totals:
        # noise only adds time, and a 1k-commit window (~30 ms) is short enough for one
        # burst of it to swing a single run's ratio by 30%. A cost that really grows
        # with history (a dict resize, a GC pass) is in every run and still shows.
        fastest_last = min(sum(r.deltas[-window:]) for r in runs)
        return fastest_last / min(sum(r.deltas[:window]) for r in runs)

    first, last = slice(None, window), slice(-window, None)
    r_ours = ratio(ours)
    r_raw = ratio(raw)
    return Row(
        f"per-commit time, last/first {label(window)} commits at {label(prep.facts)} facts",
        f"{r_ours:.2f} (p50 {us(median_of(ours, first))} → {us(median_of(ours, last))})",
        f"{r_raw:.2f} (p50 {us(median_of(raw, first))} → {us(median_of(raw, last))})",
        r_ours,
        1.2,
    )


def measure_resume(prep: Prepared, repeats: int, report: Report) -> list[Row]:
    path = prep.file_path

    def load() -> object:
        state = load_session(path)
        assert state.last_seq == prep.facts and state.transaction_count == prep.tx_count
        return state

    def open_repaired() -> object:
        store = SessionStore.open(path)
        assert store.repaired_tail_bytes == len(TORN_TAIL)
        store.close()
        return store

    loads, raws, opens = [], [], []
    for _ in range(repeats):
        loads.append(timed(load))
        raws.append(timed(lambda: raw_load(path)))
        with path.open("ab") as torn:
            torn.write(TORN_TAIL)
        opens.append(timed(open_repaired))
    name = label(prep.facts)
    report.addspread(f"load_session {name}", [t for t, _ in loads], [t for t, _ in raws])
    report.addspread(
        f"load_session {name}, of which cyclic GC", [g for _, g in loads], [g for _, g in raws]
    )
    report.addspread(
        f"SessionStore.open {name} + repair", [t for t, _ in opens], [t for t, _ in raws]
    )
    t_load, t_raw, t_open = (min(t for t, _ in x) for x in (loads, raws, opens))
    mb = path.stat().st_size / 1e6
    return [
        Row(
            f"resume: load_session of {label(prep.facts)} facts ({mb:.0f} MB)",
            f"{ms(t_load)} · {prep.facts / t_load:,.0f} facts/s",
            f"{ms(t_raw)} (read + json.loads per line)",
            t_load / t_raw,
            3,
        ),
        Row(
            f"resume: SessionStore.open of {label(prep.facts)} facts (lock + load + repair)",
            ms(t_open),
            ms(t_raw),
            t_open / t_raw,
            None,
        ),
    ]


def interleaved_power(bench: Bench, prep: Prepared, raw_first: bool) -> tuple[float, float]:
    """(store seconds, raw seconds) for the same transactions, interleaved one by one.

    Per transaction: one `commit` with durability "power", and the raw `json.dumps` +
    `os.write` of the same line to a second file in the same directory (which goes first
    alternates), + `os.fsync` where the store syncs (docs/session-format.md §6.2: a transaction
    holding any record but attemptFailed). The fsync latency of a VM's disk drifts by tens
    of percent within seconds; side by side, both sides pay the latency of the same moment.
    """
    lines = json.loads(prep.lines_json)
    syncs = [_precedes_effect(obj) for obj in lines]
    raw_path = bench.fresh_path("raw-power")
    fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    os.write(fd, prep.header)
    os.fsync(fd)
    store_path = bench.fresh_path("store-power")
    store = bench.open_store(store_path, "power")
    commit, dumps, write, sync, perf = (
        store.commit,
        json.dumps,
        os.write,
        os.fsync,
        time.perf_counter,
    )
    ours = raw = 0.0
    with GcClock():
        for i, (tx, obj) in enumerate(zip(prep.transactions, lines, strict=True)):
            if (i % 2 == 0) == raw_first:
                start = perf()
                write(fd, (dumps(obj, separators=COMPACT, ensure_ascii=False) + "\n").encode())
                if syncs[i]:
                    sync(fd)
                raw += perf() - start
            start = perf()
            commit(tx)
            ours += perf() - start
            if (i % 2 == 0) != raw_first:
                start = perf()
                write(fd, (dumps(obj, separators=COMPACT, ensure_ascii=False) + "\n").encode())
                if syncs[i]:
                    sync(fd)
                raw += perf() - start
    store.close()
    os.close(fd)
    sizes = store_path.stat().st_size, raw_path.stat().st_size
    assert sizes[0] == sizes[1], f"store wrote {sizes[0]} bytes, raw {sizes[1]}"
    store_path.unlink()
    raw_path.unlink()
    return ours, raw


def _precedes_effect(line: Any) -> bool:
    """Whether power mode syncs this transaction (docs/session-format.md §6.2), from its JSON."""
    facts = line if isinstance(line, list) else [line]
    return any(f["kind"] == "record" and f["record"]["type"] != "attemptFailed" for f in facts)


def measure_power(bench: Bench, count: int, repeats: int, report: Report) -> Row:
    prep = prepare(bench, count * 2, seed=2)  # ~1.25 facts per transaction: plenty
    prep.file_path.unlink()
    prep.transactions = prep.transactions[:count]
    prep.lines_json = json.dumps(json.loads(prep.lines_json)[:count]).encode()
    prep.facts, prep.tx_count = fact_count(prep.transactions), count
    rounds = [interleaved_power(bench, prep, raw_first=bool(r % 2)) for r in range(repeats)]
    ratios = [ours / raw for ours, raw in rounds]
    report.addspread(
        f"power: commit {count} tx, interleaved", [o for o, _ in rounds], [r for _, r in rounds]
    )
    report.spreads.append(
        (f"power: ratio per round ({repeats} rounds)", spread(ratios, lambda x: f"{x:.2f}x"), "")
    )
    o_med = statistics.median(o for o, _ in rounds)
    r_med = statistics.median(r for _, r in rounds)
    ratio = statistics.median(ratios)
    return Row(
        f"power: commit {count} tx with fsync ({prep.facts} facts), interleaved with the "
        "raw loop transaction by transaction; median of the per-round ratios",
        f"{ms(o_med)} · {us(o_med / count)}/tx (median round)",
        f"{ms(r_med)} · {us(r_med / count)}/tx (write, + fsync where the store syncs)",
        ratio,
        1.3,
    )


def incremental_commits(bench: Bench, n_facts: int, store_side: bool) -> CommitRun:
    """Payloads built between commits, as the agent loop does: only commit/write is timed.

    Unlike the pre-built runs, the heap grows from empty with the session, so the cyclic
    GC runs its full collections at the sizes a real kernel would.
    """
    path = bench.fresh_path("incremental")
    deltas: list[float] = []
    perf = time.perf_counter
    transactions = iter_transactions(n_facts, bench.environment)
    if store_side:
        store = bench.open_store(path)
        with GcClock() as gc_clock:
            for tx in transactions:
                start = perf()
                store.commit(tx)
                deltas.append(perf() - start)
        store.close()
        del store
    else:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        seq = 0
        dumps, write = json.dumps, os.write
        with GcClock() as gc_clock:
            for tx in transactions:
                obj, seq = raw_envelopes(tx, seq)
                start = perf()
                write(fd, (dumps(obj, separators=COMPACT, ensure_ascii=False) + "\n").encode())
                deltas.append(perf() - start)
                del obj
        os.close(fd)
    size = path.stat().st_size
    path.unlink()
    return CommitRun(sum(deltas), deltas, size, gc_clock.seconds)


def measure_incremental(bench: Bench, n_facts: int, repeats: int, report: Report) -> Row:
    ours: list[CommitRun] = []
    raw: list[CommitRun] = []
    for round_ in range(repeats):
        for store_side in (True, False) if round_ % 2 == 0 else (False, True):
            (ours if store_side else raw).append(incremental_commits(bench, n_facts, store_side))
    name = f"commit {label(n_facts)} facts built between commits"
    report.addspread(name, [r.seconds for r in ours], [r.seconds for r in raw])
    report.addspread(
        f"{name}, GC during the loop", [r.gc_seconds for r in ours], [r.gc_seconds for r in raw]
    )
    report.addspread(
        f"{name}, slowest single tx", [max(r.deltas) for r in ours], [max(r.deltas) for r in raw]
    )
    t_ours = min(r.seconds for r in ours)
    t_raw = min(r.seconds for r in raw)
    g_ours = min(r.gc_seconds for r in ours)
    return Row(
        f"commit {label(n_facts)} facts, payloads built between commits (heap grows as in a "
        "real kernel)",
        f"{ms(t_ours)} · p50 {us(median_of(ours))}/tx · GC {ms(g_ours)}",
        f"{ms(t_raw)} · p50 {us(median_of(raw))}/tx",
        t_ours / t_raw,
        None,
    )


# ---------------------------------------------------------------- profiles


def profile(bench: Bench, load_path: Path | None) -> None:
    prep = prepare(bench, 10_000, seed=3)
    prep.file_path.unlink()
    path = bench.fresh_path("profile-commit")
    with bench.open_store(path) as store, GcClock() as gc_clock:
        profiler = cProfile.Profile()
        profiler.enable()
        for tx in prep.transactions:
            store.commit(tx)
        profiler.disable()
    title = f"commit of {prep.facts:,} facts in {prep.tx_count:,} tx (process)"
    _print_profile(title, profiler, gc_clock.seconds)
    del prep

    if load_path is None:
        big = prepare(bench, 100_000, seed=4)
        load_path, facts = big.file_path, big.facts
        del big
    else:
        facts = load_session(load_path).last_seq
    profiler = cProfile.Profile()
    with GcClock() as gc_clock:
        profiler.enable()
        load_session(load_path)
        profiler.disable()
    _print_profile(f"load_session of {facts:,} facts", profiler, gc_clock.seconds)


def _print_profile(title: str, profiler: cProfile.Profile, gc_seconds: float) -> None:
    for order, top in (("cumulative", 25), ("tottime", 15)):
        print(f"\n### cProfile: {title}, top {top} by {order}\n")
        print("```")
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.strip_dirs().sort_stats(order).print_stats(top)
        print("```")
    print(
        f"\nThe cyclic GC ran {ms(gc_seconds)} of this; cProfile charges each collection to "
        "the call that happened to allocate when it started (often validate_json, "
        "dict.values or a tuple-building line), not to a line of its own."
    )


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="fact counts of the commit runs (default 1000,10000,100000; --quick: 1000,10000)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller runs")
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile a 10k commit and a 100k load"
    )
    parser.add_argument(
        "--power-tx", type=int, help="transactions per fsync run (default 500; --quick: 200)"
    )
    parser.add_argument("--dir", help="where the temporary session files go (default: $TMPDIR)")
    return parser.parse_args(argv)


def repeats_for(n_facts: int, quick: bool) -> int:
    if quick:
        return 3 if n_facts <= 10_000 else 2
    return 15 if n_facts <= 1_000 else 7 if n_facts <= 10_000 else 3


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sorted(args.sizes or ([1000, 10_000] if args.quick else [1000, 10_000, 100_000]))
    power_tx = args.power_tx or (200 if args.quick else 500)
    report = Report()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-session-", dir=args.dir) as tmp:
        bench = Bench(Path(tmp), os.path.realpath(tmp))
        print(f"# tiny-agent-nb session store benchmark, {now()}\n")
        print(
            f"tiny-agent-nb {revision()}, python {platform.python_version()}, "
            f"pydantic {pydantic.VERSION}, {platform.system()} {platform.machine()}, "
            f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, files in {tmp}\n"
        )
        largest: tuple[Prepared, list[CommitRun], list[CommitRun]] | None = None
        for n in sizes:
            if largest is not None:
                largest[0].file_path.unlink()
                largest = None  # free its transactions before building the next ones
            prep = prepare(bench, n)
            ours, raw = measure_commits(bench, prep, repeats_for(n, args.quick))
            _describe(prep, ours, raw)
            report.rows.append(commit_rows(prep, ours, raw, report))
            largest = (prep, ours, raw)
        assert largest is not None
        prep, ours, raw = largest
        report.rows.append(flatness_row(prep, ours, raw))
        del largest, ours, raw
        prep.transactions = []  # the next runs start from a heap without the payloads
        report.rows.append(measure_incremental(bench, prep.facts, 2 if args.quick else 3, report))
        report.rows.extend(measure_resume(prep, repeats_for(prep.facts, args.quick), report))
        report.rows.append(measure_power(bench, power_tx, 3 if args.quick else 7, report))
        print()
        report.print()
        print(
            f"\ntotal {time.perf_counter() - started:.0f} s, "
            f"load average now {os.getloadavg()[0]:.2f}"
        )
        if args.profile:
            profile(bench, prep.file_path if prep.facts >= 100_000 else None)
    return 0


def _describe(prep: Prepared, ours: list[CommitRun], raw: list[CommitRun]) -> None:
    header = len(prep.header)
    store_bytes = ours[0].size - header
    raw_bytes = raw[0].size - header
    print(
        f"- {prep.facts:,} facts in {prep.tx_count:,} transactions: the store writes "
        f"{store_bytes / 1e6:.2f} MB ({store_bytes / prep.facts:,.0f} B/fact), "
        f"the raw baseline {raw_bytes / 1e6:.2f} MB"
    )


if __name__ == "__main__":
    sys.exit(main())
