"""The same agent conversation through tiny-agent-nb's session store and its peers.

    python bench/bench_peers.py [--steps 1000,5000] [--huge] [--quick] [--repeats N]
                                [--power-steps N] [--only tiny-agent-nb,...] [--profile]

The workload (one run, N steps): per step one assistant message with one `read_file`
tool call, and that call's 1 KB tool result. Each store records it as its own API does:

- tiny-agent-nb: the commit sequence of a tool step as the agent loop writes it
  (agent/_loop.py, agent/_tool_step.py): [stepAttempt]; [assistant entry, usage];
  [toolStarted]; [tool result entry]: four transactions, facts built with
  `session.facts` inside the timed step, as the loop builds them. Durability `process`
  (no sync) and `power` (a sync before each effect: the stepAttempt's and the
  toolStarted's commits; the other two ride with the next one, docs/session-format.md §6.2).
- openai-agents `SQLiteSession`: one `add_items` per step (function_call +
  function_call_output items; one SQLite transaction, WAL). Its default
  (`synchronous=FULL`: an fsync per commit) is paired with `power`; `synchronous=NORMAL`
  (no fsync at commit in WAL mode, still safe against a process crash) with `process`.
- LangGraph `SqliteSaver`: one `put` per step of a checkpoint whose `messages` channel
  holds the conversation as langchain-core messages (what a MessagesState graph stores;
  a real ReAct graph writes two checkpoints per step, so this favours it). Each put
  serializes the whole history, so its cost grows with the history: it is timed over
  the last `--window` steps after the first N - window steps are written in one put.

Resume is "open + the whole history as the API gives it back", after the writer has
closed: `load_session`, and `SessionStore.open` + `load` + the planner's recovery view
(`plan_recovery`) for tiny-agent-nb, both from the file alone (every line reduced);
`SQLiteSession(...)` + `get_items()`; `SqliteSaver(conn)` + `get_tuple()`. The peers'
sizes include their WAL files.

- sqlite3 (power only, always there: the standard library's): SQLiteSession's tables and
  statements run synchronously, WAL, the module's default `synchronous`; what
  `SQLiteSession`'s default pays per step without its thread hop, for when the peer is
  not installed.

Raw baselines, measured in the same run on tiny-agent-nb's own lines: per step,
`json.dumps` + `os.write` of each of the step's four records (+ for power `os.fsync`
after the same two the store syncs); resume: read the file + `json.loads` of every line.
Stores run interleaved (the order rotates every repetition); the tables give medians, and
ratios from this run.

It is a report, not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import json
import os
import platform
import pstats
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _report import now, revision, settle  # bench/ is on sys.path when a script here runs

from tiny_agent_nb.agent import plan_recovery
from tiny_agent_nb.session import (
    HeaderInit,
    SessionStore,
    ToolCall,
    ToolIdentity,
    ToolStarted,
    load_session,
    new_id,
)
from tiny_agent_nb.session import facts as f

MODEL = "anthropic/claude-sonnet-4"
DIGEST = "sha256:" + "3f" * 32
COMPACT = (",", ":")
TOOL = ToolIdentity(name="read_file", version="1", source="builtin")
PROMPT = "Find why the parser fails on a trailing comma and fix it; run the tests after."
TINY, OPENAI, LANGGRAPH = "tiny-agent-nb", "openai-agents SQLiteSession", "LangGraph SqliteSaver"
PEER_MODULES = {OPENAI: "agents", LANGGRAPH: "langgraph.checkpoint.sqlite"}
WORDS = [
    "the", "parser", "fails", "when", "the", "input", "ends", "with", "a", "trailing", "comma",
    "so", "check", "tokenize", "résumé", "naïve", "数据", "value", "offset", "limit", "raise",
    "ValueError", "KeyError",
]  # fmt: skip


# ---------------------------------------------------------------- workload


@dataclass(frozen=True)
class Step:
    call_id: str
    arguments: dict[str, Any]
    text: str  # the assistant's words before its call
    result: str  # the tool's 1 KB output


def _output(rng: random.Random, size: int) -> str:
    """Tool output with quotes, backslashes, tabs, newlines and non-ASCII: real escaping."""
    lines, length = [], 0
    while length < size:
        n = rng.randrange(1, 400)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(2, 9)))
        line = f'{n:4d}\t    value = parse("{words}")  # C:\\tmp\\{n}.py'
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)[:size]


class Workload:
    """Deterministic steps; texts come from small pools (no encoder caches them)."""

    def __init__(self, seed: int = 1) -> None:
        rng = random.Random(seed)
        self._results = [_output(rng, 1024) for _ in range(32)]
        self._texts = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 20))) for _ in range(32)
        ]

    def step(self, i: int) -> Step:
        args = {"path": f"src/pkg/module_{i % 977}.py", "offset": 0, "limit": 200}
        return Step(f"call_{i:08d}", args, self._texts[i % 32], self._results[(i * 7) % 32])


Times = list[tuple[float, float]]  # (wall, CPU) seconds of each step


def seconds_per_step(times: Times) -> tuple[float, float]:
    """Median wall and median CPU time of a step. CPU time (every thread of the process)
    barely moves when other work shares the cores; wall time is what a user waits."""
    return statistics.median(t for t, _ in times), statistics.median(c for _, c in times)


# ---------------------------------------------------------------- tiny-agent-nb


def tiny_open(path: Path, durability: str) -> SessionStore:
    env = str(path.parent)
    create = HeaderInit(cwd=env, provider="openrouter", model=MODEL, environment_identity=env)
    return SessionStore.open(path, create=create, durability=durability)  # type: ignore[arg-type]


def tiny_write(path: Path, work: Workload, steps: int, durability: str) -> Times:
    """The loop's commits of `steps` tool steps; the seconds of each step."""
    env = str(path.parent)
    perf, cpu = time.perf_counter, time.process_time
    times: list[tuple[float, float]] = []
    with tiny_open(path, durability) as store:
        operation_id, entry_id = new_id(), new_id()
        store.commit([f.user_message(PROMPT, id=entry_id), f.run_started(operation_id, entry_id)])
        for i in range(1, steps + 1):
            s = work.step(i)
            start, cstart = perf(), cpu()
            attempt_id = new_id()
            store.commit(
                [
                    f.NewFact(
                        f.StepAttempt(
                            operationId=operation_id,
                            step=i,
                            attempt=1,
                            provider="openrouter",
                            model=MODEL,
                            configurationDigest=DIGEST,
                        ),
                        attempt_id,
                    )
                ]
            )
            call = ToolCall(id=s.call_id, name=TOOL.name, arguments=s.arguments)
            store.commit(
                [
                    f.assistant_message(
                        attempt_id,
                        content=s.text,
                        tool_calls=[call],
                        reasoning=None,
                        refusal=None,
                        finish_reason="tool_calls",
                    ),
                    f.usage(
                        attempt_id=attempt_id,
                        input_tokens=1200 + 300 * i,
                        output_tokens=40,
                        reasoning_tokens=0,
                        cached_input_tokens=900,
                        cost=0.0042,
                    ),
                ]
            )
            commit_tool_call(
                store, call, s.result, operation_id=operation_id, attempt_id=attempt_id, env=env
            )
            times.append((perf() - start, cpu() - cstart))
    return times


def commit_tool_call(
    store: SessionStore,
    call: ToolCall,
    result: str,
    *,
    operation_id: str,
    attempt_id: str,
    env: str,
) -> None:
    """A tool call's two commits as the loop makes them: its intent, then its result."""
    intent = f.tool_started(
        operation_id,
        attempt_id,
        call.id,
        tool=TOOL,
        arguments=dict(call.arguments),
        replay_policy="safeRead",
        environment_identity=env,
    )
    store.commit([intent])
    body = intent.body
    assert isinstance(body, ToolStarted) and intent.id is not None
    store.commit(
        [
            f.tool_result(
                tool_started_id=intent.id,
                result_entry_id=body.resultEntryId,
                tool_call_id=call.id,
                content=result,
                outcome="completed",
                is_error=False,
            )
        ]
    )


def tiny_load(path: Path) -> int:
    """What a resuming reader does once the writer has closed."""
    return len(load_session(path).entries)


def tiny_open_recover(path: Path) -> int:
    """What a kernel does with the file at start-up: open it, load, plan the recovery."""
    with SessionStore.open(path) as store:
        state = store.load()
        plan = plan_recovery(state, {TOOL.name: TOOL}, str(path.parent))
        assert plan is not None  # the run was left open: recovery has an operation to close
        return len(state.entries)


# ---------------------------------------------------------------- raw baselines


# The records of a step after which power mode syncs: the stepAttempt, the toolStarted.
POWER_SYNCS = frozenset({0, 2})


def step_records(path: Path) -> list[list[bytes]]:
    """The records of each step as plain JSON-ready objects re-encoded per write."""
    lines = path.read_bytes().splitlines()[2:]  # header, [user, runStarted]
    return [lines[i : i + 4] for i in range(0, len(lines), 4)]


def raw_write(path: Path, records: list[list[bytes]], syncs: frozenset[int]) -> Times:
    """json.dumps + os.write of every record of every step, os.fsync after the records
    numbered in `syncs`."""
    objects = [[json.loads(line) for line in step] for step in records]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    dumps, write, fsync = json.dumps, os.write, os.fsync
    perf, cpu = time.perf_counter, time.process_time
    times: list[tuple[float, float]] = []
    try:
        for step in objects:
            start, cstart = perf(), cpu()
            for k, obj in enumerate(step):
                write(fd, (dumps(obj, separators=COMPACT, ensure_ascii=False) + "\n").encode())
                if k in syncs:
                    fsync(fd)
            times.append((perf() - start, cpu() - cstart))
    finally:
        os.close(fd)
    return times


def raw_read(path: Path) -> int:
    loads = json.loads
    with path.open("rb") as file:
        data = file.read()
    return len([loads(line) for line in data.splitlines()])


# ---------------------------------------------------------------- openai-agents


class _Loop:
    """One event loop for every async peer call (asyncio.run would time loop start-up)."""

    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def run(cls, coro: Any) -> Any:
        if cls.loop is None:
            cls.loop = asyncio.new_event_loop()
        return cls.loop.run_until_complete(coro)


def _openai_items(s: Step) -> list[dict[str, Any]]:
    return [
        {
            "type": "function_call",
            "call_id": s.call_id,
            "name": TOOL.name,
            "arguments": json.dumps(s.arguments),
            "id": f"fc_{s.call_id}",
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": s.call_id, "output": s.result},
    ]


def _sqlite_session(path: Path, durability: str) -> Any:
    from agents.memory import SQLiteSession  # noqa: PLC0415 (an optional peer)

    if durability == "power":
        return SQLiteSession("bench", path)  # its default: synchronous=FULL, WAL

    class NoSyncSession(SQLiteSession):  # type: ignore[misc]
        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL: no fsync at commit

    return NoSyncSession("bench", path)


def openai_write(path: Path, work: Workload, steps: int, durability: str) -> Times:
    session = _sqlite_session(path, durability)
    perf, cpu = time.perf_counter, time.process_time
    times: list[tuple[float, float]] = []
    try:
        _Loop.run(session.add_items([{"role": "user", "content": PROMPT}]))
        for i in range(1, steps + 1):
            s = work.step(i)
            start, cstart = perf(), cpu()
            items = _openai_items(s)
            items[0]["arguments"] = json.dumps(s.arguments)
            _Loop.run(session.add_items(items))
            times.append((perf() - start, cpu() - cstart))
    finally:
        session.close()
    return times


def openai_resume(path: Path) -> int:
    from agents.memory import SQLiteSession  # noqa: PLC0415 (an optional peer)

    session = SQLiteSession("bench", path)
    try:
        return len(_Loop.run(session.get_items()))
    finally:
        session.close()


def sqlite_write(path: Path, work: Workload, steps: int, durability: str) -> Times:
    """SQLiteSession's tables and add_items statements (openai-agents 0.24), run here
    synchronously on the standard library's sqlite3: WAL, `synchronous` as the module
    leaves it (power) or NORMAL (process)."""
    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    if durability == "process":
        conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(
        """
        CREATE TABLE IF NOT EXISTS agent_sessions (session_id TEXT PRIMARY KEY,
            created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
            updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
        CREATE TABLE IF NOT EXISTS agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL, message_data TEXT NOT NULL,
            created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
            FOREIGN KEY (session_id) REFERENCES agent_sessions (session_id) ON DELETE CASCADE);
        CREATE INDEX IF NOT EXISTS idx_agent_messages_session_id
            ON agent_messages (session_id, created_at);
        """
    )
    conn.commit()
    perf, cpu = time.perf_counter, time.process_time
    times: Times = []

    def add_items(items: list[dict[str, Any]]) -> None:
        conn.execute("INSERT OR IGNORE INTO agent_sessions (session_id) VALUES (?)", ("bench",))
        conn.executemany(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
            [("bench", json.dumps(item)) for item in items],
        )
        conn.execute(
            "UPDATE agent_sessions SET updated_at = CURRENT_TIMESTAMP WHERE session_id = ?",
            ("bench",),
        )
        conn.commit()

    try:
        add_items([{"role": "user", "content": PROMPT}])
        for i in range(1, steps + 1):
            s = work.step(i)
            start, cstart = perf(), cpu()
            add_items(_openai_items(s))
            times.append((perf() - start, cpu() - cstart))
    finally:
        conn.close()
    return times


def sqlite_synchronous() -> str:
    """The sqlite3 module's default `synchronous` of a WAL database (its name)."""
    with tempfile.TemporaryDirectory() as name:
        conn = sqlite3.connect(str(Path(name) / "probe.db"))
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            level = conn.execute("PRAGMA synchronous").fetchone()[0]
        finally:
            conn.close()
    return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(level, str(level))


# ---------------------------------------------------------------- LangGraph


def _lc_messages(s: Step) -> list[Any]:
    from langchain_core.messages import AIMessage, ToolMessage  # noqa: PLC0415 (an optional peer)

    call = {"name": TOOL.name, "args": dict(s.arguments), "id": s.call_id, "type": "tool_call"}
    return [
        AIMessage(content=s.text, tool_calls=[call]),
        ToolMessage(content=s.result, tool_call_id=s.call_id, name=TOOL.name),
    ]


class _Graph:
    """A thread of checkpoints whose `messages` channel grows by one step per put."""

    def __init__(self, path: Path, durability: str) -> None:
        from langchain_core.messages import HumanMessage  # noqa: PLC0415 (an optional peer)
        from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: PLC0415 (an optional peer)

        self.conn = sqlite3.connect(str(path), check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        if durability == "process":
            self.conn.execute("PRAGMA synchronous=NORMAL")
        self.config: dict[str, Any] = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
        self.messages: list[Any] = [HumanMessage(content=PROMPT)]
        self.version: str | None = None

    def put(self, step: int) -> None:
        from langgraph.checkpoint.base import empty_checkpoint  # noqa: PLC0415 (an optional peer)

        self.version = self.saver.get_next_version(self.version, None)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": self.messages}
        checkpoint["channel_versions"] = {"messages": self.version}
        metadata: Any = {"source": "loop", "step": step, "parents": {}}
        self.config = self.saver.put(self.config, checkpoint, metadata, {"messages": self.version})


def langgraph_write(path: Path, work: Workload, steps: int, durability: str, window: int) -> Times:
    """The times of each of the last `window` steps; the steps before go in one put."""
    graph = _Graph(path, durability)
    perf, cpu = time.perf_counter, time.process_time
    first = max(1, steps - window + 1)
    for i in range(1, first):
        graph.messages.extend(_lc_messages(work.step(i)))
    if first > 1:
        graph.put(first - 1)
    times: Times = []
    try:
        for i in range(first, steps + 1):
            start, cstart = perf(), cpu()
            graph.messages.extend(_lc_messages(work.step(i)))
            graph.put(i)
            times.append((perf() - start, cpu() - cstart))
    finally:
        graph.conn.close()
    return times


def langgraph_resume(path: Path) -> int:
    from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: PLC0415 (an optional peer)

    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        got = saver.get_tuple({"configurable": {"thread_id": "bench", "checkpoint_ns": ""}})
        assert got is not None
        return len(got.checkpoint["channel_values"]["messages"])
    finally:
        conn.close()


# ---------------------------------------------------------------- measuring


Writer = Callable[[Path, Workload, int, str], Times]


@dataclass
class Store:
    name: str
    write: Writer
    resumes: dict[str, Callable[[Path], int]]  # how to resume -> call


@dataclass
class Sample:
    step: Times = field(default_factory=list)  # median (wall, CPU) per step, per repetition
    resume: dict[str, Times] = field(default_factory=dict)  # (wall, CPU) of each resume
    size: int = 0


def stores(names: Sequence[str], window: int) -> list[Store]:
    def graph_write(path: Path, work: Workload, steps: int, durability: str) -> Times:
        return langgraph_write(path, work, steps, durability, graph_window(steps, window))

    every = {
        TINY: Store(
            TINY,
            tiny_write,
            {
                "load_session": tiny_load,
                "SessionStore.open + load + plan_recovery": tiny_open_recover,
            },
        ),
        OPENAI: Store(OPENAI, openai_write, {"SQLiteSession() + get_items()": openai_resume}),
        LANGGRAPH: Store(LANGGRAPH, graph_write, {"SqliteSaver() + get_tuple()": langgraph_resume}),
    }
    return [every[n] for n in names]


def graph_window(steps: int, window: int) -> int:
    """LangGraph steps timed: at 100k steps each put writes ~260 MB (the whole history)."""
    return window if steps < 100_000 else min(window, 5)


def available(wanted: Sequence[str]) -> list[str]:
    """The stores that import; a peer that does not is skipped with one line."""
    names = []
    for name in wanted:
        module = PEER_MODULES.get(name)
        try:
            if module is not None:
                importlib.import_module(module)
        except ImportError as exc:
            print(f"- {name}: skipped, not installed ({exc}); pip install 'tiny-agent-nb[bench]'")
        else:
            names.append(name)
    return names


def timed(call: Callable[[], object]) -> tuple[float, float]:
    settle()
    start, cstart = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - start, time.process_time() - cstart


def measure_size(
    tmp: Path, work: Workload, chosen: list[Store], steps: int, repeats: int
) -> tuple[dict[str, Sample], Sample]:
    reference = tmp / f"reference-{steps}.jsonl"
    tiny_write(reference, work, steps, "process")  # warm-up, and the raw side's records
    records = step_records(reference)
    samples = {s.name: Sample() for s in chosen}
    raw = Sample(resume={"read + json.loads per line": []})
    sides: list[Store | None] = [*chosen, None]  # None: the raw baseline
    for rep in range(repeats):
        order = sides[rep % len(sides) :] + sides[: rep % len(sides)]
        files: dict[str, Path] = {}
        for side in order:  # writes, interleaved
            name = "raw" if side is None else side.name
            path = tmp / f"{name.split()[0]}-{steps}-{rep}.db"
            settle()
            if side is None:
                raw.step.append(seconds_per_step(raw_write(path, records, frozenset())))
                raw.size = path.stat().st_size
                path.unlink()
                continue
            samples[side.name].step.append(
                seconds_per_step(side.write(path, work, steps, "process"))
            )
            samples[side.name].size = sum(p.stat().st_size for p in tmp.glob(path.name + "*"))
            files[side.name] = path
        for side in order:  # resumes, interleaved, of the files just written
            if side is None:
                raw.resume["read + json.loads per line"].append(timed(lambda: raw_read(reference)))
                continue
            path = files[side.name]
            for how, call in side.resumes.items():
                took = timed(lambda call=call, path=path: call(path))  # type: ignore[misc]
                samples[side.name].resume.setdefault(how, []).append(took)
        for path in tmp.glob(f"*-{steps}-{rep}.db*"):
            path.unlink()
    reference.unlink()
    return samples, raw


SQLITE = "sqlite3"  # the stand-in for SQLiteSession's default, always measured in power


def measure_power(
    tmp: Path, work: Workload, chosen: list[Store], steps: int, repeats: int
) -> tuple[dict[str, Times], Times]:
    reference = tmp / "reference-power.jsonl"
    tiny_write(reference, work, steps, "process")
    records = step_records(reference)
    reference.unlink()
    writers: dict[str, Writer] = {s.name: s.write for s in chosen}
    writers[SQLITE] = sqlite_write
    ours: dict[str, Times] = {name: [] for name in writers}
    raw: Times = []
    sides: list[str | None] = [*writers, None]
    for rep in range(repeats):
        for side in sides[rep % len(sides) :] + sides[: rep % len(sides)]:
            path = tmp / f"power-{rep}-{'raw' if side is None else side.split()[0]}.db"
            settle()
            if side is None:
                raw.append(seconds_per_step(raw_write(path, records, POWER_SYNCS)))
            else:
                ours[side].append(seconds_per_step(writers[side](path, work, steps, "power")))
        for path in tmp.glob(f"power-{rep}-*"):
            path.unlink()
    return ours, raw


# ---------------------------------------------------------------- reporting


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def _medians(pairs: Times) -> tuple[float, float]:
    return statistics.median(t for t, _ in pairs), statistics.median(c for _, c in pairs)


def _cells(
    values: tuple[float, float], base: tuple[float, float], unit: Callable[[float], str]
) -> tuple[str, str]:
    (wall, cpu), (base_wall, base_cpu) = values, base
    return (
        f"{unit(wall)} · {unit(cpu)}",
        f"{wall / base_wall:,.2f}x · {cpu / base_cpu:,.2f}x",
    )


def print_size(steps: int, samples: dict[str, Sample], raw: Sample, window: int) -> None:
    raw_step = _medians(raw.step)
    raw_resume = _medians(raw.resume["read + json.loads per line"])
    size = samples[TINY].size if TINY in samples else raw.size
    print(f"\n### {steps:,} steps (tiny-agent-nb file {size / 1e6:.1f} MB)\n")
    print("Each cell: wall · CPU (medians; CPU time counts every thread of the process).\n")
    print("| store: resume call | per step | vs raw | resume | vs raw |")
    print("|---|---|---|---|---|")
    print(
        "| raw: json.dumps + os.write per record; read + json.loads per line | "
        f"{' | '.join(_cells(raw_step, raw_step, us))} | "
        f"{' | '.join(_cells(raw_resume, raw_resume, ms))} |"
    )
    for name, sample in samples.items():
        timed_steps = graph_window(steps, window)
        where = f" (last {timed_steps} steps)" if name == LANGGRAPH and steps > timed_steps else ""
        step, step_ratio = _cells(_medians(sample.step), raw_step, us)
        for k, (how, times) in enumerate(sample.resume.items()):
            resume, resume_ratio = _cells(_medians(times), raw_resume, ms)
            writes = f"{step}{where} | {step_ratio}" if k == 0 else "〃 | 〃"
            print(
                f"| {name} ({sample.size / 1e6:.1f} MB): {how} | {writes} | "
                f"{resume} | {resume_ratio} |"
            )


def print_power(steps: int, ours: dict[str, Times], raw: Times) -> None:
    raw_step = _medians(raw)
    sqlite_step = _medians(ours[SQLITE])
    print(f"\n### power: {steps} steps, synced as each store does by default\n")
    print("Each cell: wall · CPU (medians).\n")
    print("| store | syncs per step | per step | vs raw | vs sqlite3 WAL |")
    print("|---|---|---|---|---|")
    syncs = {TINY: len(POWER_SYNCS), OPENAI: 1, LANGGRAPH: 1, SQLITE: 1}
    labels = {
        TINY: "durability power",
        OPENAI: "default",
        LANGGRAPH: "synchronous=FULL",
        SQLITE: f"SQLiteSession's statements, WAL, synchronous={sqlite_synchronous()}",
    }
    rows = [("raw: json.dumps + os.write per record, os.fsync after two", raw_step)]
    rows += [(f"{name}, {labels[name]}", _medians(times)) for name, times in ours.items()]
    for k, (what, step) in enumerate(rows):
        cell, vs_raw = _cells(step, raw_step, us)
        vs_sqlite = _cells(step, sqlite_step, us)[1]
        count = len(POWER_SYNCS) if k == 0 else syncs[list(ours)[k - 1]]
        print(f"| {what} | {count} | {cell} | {vs_raw} | {vs_sqlite} |")


def profile_resume(tmp: Path, work: Workload, steps: int) -> None:
    """Where tiny-agent-nb's resume goes: cProfile, and tracemalloc's peak per file byte."""
    path = tmp / f"profile-{steps}.jsonl"
    tiny_write(path, work, steps, "process")
    size = path.stat().st_size
    for name, call in (("load_session", tiny_load), ("open + plan_recovery", tiny_open_recover)):
        settle()
        profiler = cProfile.Profile()
        profiler.enable()
        call(path)
        profiler.disable()
        print(f"\n### cProfile: {name} of {steps:,} steps ({size / 1e6:.1f} MB), by tottime\n")
        print("```")
        pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(20)
        print("```")
    settle()
    tracemalloc.start()
    state = load_session(path)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del state
    print(
        f"\ntracemalloc, load_session of {size / 1e6:.1f} MB: peak {peak / 1e6:.0f} MB "
        f"({peak / size:.1f}x the file), held after {held / 1e6:.0f} MB ({held / size:.1f}x)"
    )
    path.unlink()


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--steps",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="conversation lengths (default 1000,5000; --quick: 200)",
    )
    parser.add_argument(
        "--huge", action="store_true", help="also 100,000 steps (one repetition, ~2 GB of files)"
    )
    parser.add_argument("--quick", action="store_true", help="small, one repetition")
    parser.add_argument("--repeats", type=int, help="repetitions per size (default 5; quick 1)")
    parser.add_argument("--power-steps", type=int, help="steps of the fsync runs (default 300)")
    parser.add_argument(
        "--window", type=int, default=50, help="LangGraph steps timed (at most 5 at 100k)"
    )
    parser.add_argument(
        "--only", help=f"comma-separated stores among: {TINY}, {OPENAI}, {LANGGRAPH}"
    )
    parser.add_argument("--profile", action="store_true", help="profile tiny-agent-nb's resume")
    parser.add_argument("--dir", help="where the temporary files go (default: $TMPDIR)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sorted(args.steps or ([200] if args.quick else [1000, 5000]))
    if args.huge:
        sizes.append(100_000)
    repeats = args.repeats or (1 if args.quick else 5)
    power_steps = args.power_steps or (30 if args.quick else 300)
    wanted = [n.strip() for n in args.only.split(",")] if args.only else [TINY, OPENAI, LANGGRAPH]
    started = time.perf_counter()
    print(f"# tiny-agent-nb and its peers, {now()}\n")
    print(
        f"tiny-agent-nb {revision()}, python {platform.python_version()}, sqlite "
        f"{sqlite3.sqlite_version}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}\n"
    )
    chosen = stores(available(wanted), args.window)
    work = Workload()
    with tempfile.TemporaryDirectory(prefix="bench-peers-", dir=args.dir) as name:
        tmp = Path(name)
        for steps in sizes:
            reps = repeats if steps < 100_000 else 1
            samples, raw = measure_size(tmp, work, chosen, steps, reps)
            print_size(steps, samples, raw, args.window)
        ours, raw_power = measure_power(tmp, work, chosen, power_steps, repeats)
        print_power(power_steps, ours, raw_power)
        print(
            f"\ntotal {time.perf_counter() - started:.0f} s, "
            f"load average now {os.getloadavg()[0]:.2f}"
        )
        if args.profile:
            for steps in sizes:
                profile_resume(tmp, work, steps)
    if _Loop.loop is not None:
        _Loop.loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
