"""Benchmark the agent loop's own cost per step against a raw baseline measured in the same run.

    python bench/bench_loop.py [--histories 10,1000] [--steps 20] [--repeats 9] [--quick]
                               [--profile] [--budget USD]

What is timed: `AgentLoop.run` driving the real `Provider` over an in-process httpx
transport (`ScriptedTransport`) that answers from a script of canned chat-completions
responses (one JSON
object per request, or the same answers streamed as SSE chunks), and a trivial
in-process tool that returns a constant ~1 KB result at once. Everything the loop
itself does is inside the measurement: the context built per request, the four commits of a
step (stepAttempt / assistant entry + usage / toolStarted / tool result: validation,
encoding, the `os.write`), tool-argument validation, and the
provider's request building, httpx plumbing and response parsing. Two things are not:

- model time: wall time inside the transport (it takes the request body piece by piece,
  as a socket would, pops a pre-rendered answer and wraps it in an `httpx.Response`);
- tool time: wall time inside `Tool.run`.

Both are measured on every step and subtracted, so what is reported is loop overhead.

A step is one model step with a tool call and its tool run. Per-step times come from
marks taken in `LoopObserver.on_tool_end`; the first step of a run (which also commits
the user entry and takes the `store.load()` snapshot) and the last (text answer +
operationFinished) are left out of the per-step median and shown separately as the
cost of a one-step `run()`.

History is built first through the real loop (runs of up to 50 tool steps, each ending
in a text answer), committed to a session file that every repeat copies and reopens.
"10 steps of history" means 10 tool calls with their ~1 KB results already in the
context (23 messages, ~25 KB per request); "1,000 steps" is 2,041 messages, ~1.5 MB sent
per request. A timed run then adds `--steps` more steps (default 20).

Key figure: the loop's CPU time per step at 1,000 steps of history against 1% of a 1 s
model call (10 ms); target ≤ 1 (every request builds and encodes its context, so the
cost grows with the history: flatness, 1,000 steps / 10, is shown for information).

Raw baseline, interleaved with the loop runs (alternating which goes first): per step,
`json.dumps` + one `os.write` per transaction of the very facts the loop committed for
one step (read back from its file), `json.dumps` of the whole request body as a dict
(the message list of an actual request at that history), and `json.loads` of the
response (of each SSE chunk when streamed).

The machine this was written for has 2 cores shared with other work: the histories are
measured round-robin so the flatness ratio compares runs made in the same minutes, and
the tables show the median over repeats of each run's median step, with the quietest
repeat and this thread's CPU time (`time.thread_time`) as cross-checks.
It is a report, not a test: missing a target still exits 0.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import os
import platform
import pstats
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pydantic
from _report import (  # bench/ is on sys.path when a script here runs
    GcClock,
    Row,
    now,
    print_rows,
    print_spreads,
    revision,
    settle,
    spread,
)

from tiny_agent_nb.agent import AgentLoop, LoopConfig, LoopObserver
from tiny_agent_nb.provider import Completion, Provider, ProviderConfig, StreamEvent, messages
from tiny_agent_nb.session import Fact, HeaderInit, NewFact, SessionState, SessionStore
from tiny_agent_nb.tools import (
    Tool,
    ToolArguments,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolSchema,
)

MODEL = "bench/model"
BASE_URL = "http://model.invalid/v1"
API_KEY = "sk-bench-0123456789abcdef"
COMPACT = (",", ":")
PROMPT = "Look up the keys one by one, then summarize what you found."
RUN_LENGTH = 50  # tool steps per run while the history is built
SSE_PIECE = 12  # characters of text / arguments per streamed chunk
STEP_BUDGET = 0.01  # seconds: 1% of a 1 s model call, the target of a step's own work


def _result_text(size: int = 1024) -> str:
    """~1 KB shaped like tool output: quotes, backslashes, tabs, newlines, non-ASCII."""
    lines, n = [], 0
    while sum(len(line) + 1 for line in lines) < size:
        n += 1
        lines.append(f'{n:4d}\t    value = parse("résumé 数据 {n}")  # C:\\tmp\\{n}.py')
    return "\n".join(lines)[:size]


RESULT = _result_text()
REASONING = (
    "The previous key resolved; the next one is listed in the index, so look it up "
    "before writing the summary. Keep the limit at its default."
)
ANSWER = (
    "All keys resolved. Each lookup returned the parsed values of its module; none of "
    "them failed, and the values agree with the index. Nothing else needs to change."
)


# ---------------------------------------------------------------- the scripted model


def _answer(n: int, *, tool: bool) -> dict[str, Any]:
    """The `message` + `finish_reason` of answer number n (a tool call or the text)."""
    if tool:
        arguments = json.dumps({"key": f"module_{n}"})
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "reasoning": REASONING,
            "tool_calls": [
                {
                    "id": f"call_{n:08d}",
                    "type": "function",
                    "function": {"name": Lookup.name, "arguments": arguments},
                }
            ],
        }
        return {"message": message, "finish_reason": "tool_calls"}
    return {"message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}


def _usage(n: int) -> dict[str, Any]:
    return {"prompt_tokens": 1200 + n, "completion_tokens": 60, "total_tokens": 1260 + n}


def render_json(n: int, *, tool: bool) -> bytes:
    answer = _answer(n, tool=tool)
    body = {
        "id": f"gen-{n}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [{"index": 0, **answer}],
        "usage": _usage(n),
    }
    return json.dumps(body, separators=COMPACT).encode()


def _pieces(text: str) -> list[str]:
    return [text[i : i + SSE_PIECE] for i in range(0, len(text), SSE_PIECE)] or [""]


def render_sse(n: int, *, tool: bool) -> list[bytes]:
    """The same answer as `render_json`, as `chat.completion.chunk` events (one per chunk
    of bytes handed to httpx): role, reasoning / content pieces, the tool call's head and
    argument pieces, finish_reason, usage, [DONE]."""
    answer = _answer(n, tool=tool)
    message = answer["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if message.get("reasoning"):
        deltas += [{"reasoning": p} for p in _pieces(message["reasoning"])]
    if message.get("content"):
        deltas += [{"content": p} for p in _pieces(message["content"])]
    for i, call in enumerate(message.get("tool_calls", [])):
        head = {"name": call["function"]["name"], "arguments": ""}
        deltas.append(
            {"tool_calls": [{"index": i, "id": call["id"], "type": "function", "function": head}]}
        )
        deltas += [
            {"tool_calls": [{"index": i, "function": {"arguments": p}}]}
            for p in _pieces(call["function"]["arguments"])
        ]
    base = {"id": f"gen-{n}", "object": "chat.completion.chunk", "created": 1_700_000_000}
    base["model"] = MODEL
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append(
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": answer["finish_reason"]}]}
    )
    chunks.append({**base, "choices": [], "usage": _usage(n)})
    events = [b"data: " + json.dumps(c, separators=COMPACT).encode() + b"\n\n" for c in chunks]
    return [*events, b"data: [DONE]\n\n"]


class ScriptedModel(httpx.BaseTransport):
    """The transport: answers are rendered when enqueued (untimed); a request only pops
    one and wraps it in a response. The body is consumed piece by piece, as a socket
    write would, not joined (`httpx.MockTransport` calls `request.read()`, which copies
    the whole history into one buffer per request: a cost of the mock, not of the
    loop). `seconds` is the wall time spent here: the model time the overhead excludes."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.answers: deque[bytes | list[bytes]] = deque()
        self.seconds = 0.0
        self.requests = 0
        self.serial = 0
        self.keep: int | None = None  # request number whose body is kept
        self.kept: bytes = b""

    def enqueue(self, tool_steps: int) -> None:
        """`tool_steps` tool-call answers, then a text answer."""
        render = render_sse if self.stream else render_json
        for i in range(tool_steps + 1):
            self.serial += 1
            self.answers.append(render(self.serial, tool=i < tool_steps))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        start = time.perf_counter()
        self.requests += 1
        pieces = list(request.stream)  # type: ignore[call-overload]
        if self.requests == self.keep:
            self.kept = b"".join(pieces)
        answer = self.answers.popleft()
        if isinstance(answer, list):
            response = httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=iter(answer)
            )
        else:
            # An iterator, as a socket gives: `content=bytes` makes a response already read,
            # whose iter_raw() (what the provider reads) raises StreamConsumed.
            response = httpx.Response(
                200, headers={"content-type": "application/json"}, content=iter((answer,))
            )
        self.seconds += time.perf_counter() - start
        return response


class Lookup(Tool):
    """The trivial tool: validates its arguments like any tool, returns ~1 KB at once."""

    name = "lookup"
    description = "Look a key up in the index."
    replay_policy: ClassVar = "safeRead"

    class Arguments(ToolArguments):
        key: str
        limit: int = 20

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._output = ToolOutput(RESULT)

    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        start = time.perf_counter()
        self.calls += 1
        output = self._output
        self.seconds += time.perf_counter() - start
        return output


# ---------------------------------------------------------------- instrumented harness


class TimedStore(SessionStore):
    """The real store; adds up the wall time of `commit` (its subscribers included) and
    of `load` (each copy of the state the loop takes)."""

    commit_seconds = 0.0
    load_seconds = 0.0

    def commit(self, facts: Sequence[NewFact]) -> list[Fact]:
        start = time.perf_counter()
        try:
            return super().commit(facts)
        finally:
            self.commit_seconds += time.perf_counter() - start

    def load(self) -> SessionState:
        start = time.perf_counter()
        try:
            return super().load()
        finally:
            self.load_seconds += time.perf_counter() - start


class TimedProvider:
    """Delegates to the real `Provider`; adds up the wall time of `complete`."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.seconds = 0.0

    def complete(
        self,
        context: messages.Context,
        tools: Sequence[ToolSchema],
        *,
        on_event: Callable[[StreamEvent], None] | None = None,
    ) -> Completion:
        start = time.perf_counter()
        try:
            return self.provider.complete(context, tools, on_event=on_event)
        finally:
            self.seconds += time.perf_counter() - start


@dataclass(frozen=True)
class Mark:
    """Clocks read together: wall, this thread's CPU time, and the accumulated wall time
    of each instrumented part."""

    wall: float
    cpu: float  # time.thread_time(): does not advance while the process is preempted
    model: float
    tool: float
    provider: float  # Provider.complete, model time included
    commit: float
    load: float

    def __sub__(self, other: Mark) -> Mark:
        return Mark(*(a - b for a, b in zip(self.values(), other.values(), strict=True)))

    def values(self) -> tuple[float, ...]:
        return (self.wall, self.cpu, self.model, self.tool, self.provider, self.commit, self.load)

    @property
    def overhead(self) -> float:
        return self.wall - self.model - self.tool

    @property
    def cpu_overhead(self) -> float:
        """CPU time of the step minus model and tool wall time (both ~all CPU, tiny)."""
        return self.cpu - self.model - self.tool


class Harness:
    """Store + provider + loop over one session file, wired as tests/test_agent_loop.py."""

    def __init__(
        self, path: Path, workspace: Path, stream: bool, budget: float | None = None
    ) -> None:
        self.model = ScriptedModel(stream)
        self.tool = Lookup()
        config = ProviderConfig(model=MODEL, base_url=BASE_URL, api_key=API_KEY, stream=stream)
        self.provider = TimedProvider(Provider(config, transport=self.model))
        self.store = TimedStore.open(
            path,
            create=HeaderInit(
                cwd=str(workspace),
                provider="openrouter",
                model=MODEL,
                environment_identity=str(workspace),
            ),
        )
        self.marks: list[Mark] = []
        harness = self

        class Observer(LoopObserver):
            def on_tool_end(self, call: Any, output: Any, outcome: str) -> None:
                harness.marks.append(harness.mark())

        self.loop = AgentLoop(
            self.store,
            self.provider,
            ToolRegistry([self.tool]),
            ToolContext(workspace=workspace, namespace={}),
            LoopConfig(
                config,
                max_steps=100_000,
                # No compaction: this times a step's overhead at a given history length
                # (bench_compaction.py times requests after a checkpoint).
                context_window=10**9,
                # --budget: the budget check runs before every attempt (never reached).
                budget=budget,
            ),
            observer=Observer(),
        )

    def mark(self) -> Mark:
        return Mark(
            time.perf_counter(),
            time.thread_time(),
            self.model.seconds,
            self.tool.seconds,
            self.provider.seconds,
            self.store.commit_seconds,
            self.store.load_seconds,
        )

    def run(self, tool_steps: int) -> list[Mark]:
        """One `run()`: `tool_steps` tool steps then a text answer. Returns the marks:
        start, after each tool step, end."""
        self.model.enqueue(tool_steps)
        calls = self.tool.calls
        self.marks = [self.mark()]
        result = self.loop.run(PROMPT)
        self.marks.append(self.mark())
        assert result.outcome == "completed", result
        assert self.tool.calls - calls == tool_steps and not self.model.answers
        return self.marks

    def close(self) -> None:
        self.loop.close()
        self.store.close()
        self.provider.provider.close()


# ---------------------------------------------------------------- timing helpers


@dataclass
class Bench:
    workdir: Path
    workspace: Path
    budget: float | None = None
    serial: int = 0

    def fresh_path(self, stem: str) -> Path:
        self.serial += 1
        return self.workdir / f"{stem}-{self.serial}.jsonl"


@dataclass
class History:
    """A session file holding `steps` tool steps, built through the real loop."""

    steps: int
    stream: bool
    path: Path
    messages: int  # messages in the context (system prompt included)


def build_history(bench: Bench, steps: int, stream: bool) -> History:
    path = bench.fresh_path(f"history-{steps}-{'sse' if stream else 'json'}")
    harness = Harness(path, bench.workspace, stream)
    left = steps
    while left:
        harness.run(min(left, RUN_LENGTH))
        left -= min(left, RUN_LENGTH)
    messages = 1 + len(harness.store.load().entries)  # the system prompt + every entry
    harness.close()
    return History(steps, stream, path, messages)


@dataclass
class LoopRun:
    """One timed run over a fresh copy of a history: per inner step, the part deltas."""

    steps: list[Mark]  # inner steps (between two on_tool_end marks)
    probe: Mark  # a separate one-step run() answered with text
    total: Mark
    gc_seconds: float
    page_faults: int  # minor page faults during the timed run (fresh pages touched)
    request: bytes  # the body of the request in the middle of the run
    lines: list[bytes]  # the session file's lines of one inner step

    def p50(self, part: Callable[[Mark], float]) -> float:
        return statistics.median(part(m) for m in self.steps)


def loop_run(bench: Bench, history: History, steps: int) -> LoopRun:
    path = bench.fresh_path("timed")
    shutil.copyfile(history.path, path)
    harness = Harness(path, bench.workspace, history.stream, bench.budget)
    try:
        # One-step run() first (the history stays at its size for the timed run). The
        # objects that opening the session left are collected first: that collection is
        # the open's (once per kernel), not the run's, and it grows with the history.
        settle()
        probe = harness.run(0)
        harness.model.keep = harness.model.requests + 1 + steps // 2
        with GcClock() as gc_clock:
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            marks = harness.run(steps)
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        request = harness.model.kept
    finally:
        harness.close()
    deltas = [b - a for a, b in itertools.pairwise(marks)]
    lines = _step_lines(path)
    path.unlink()
    return LoopRun(
        steps=deltas[1:-1],  # without run start + step 1, and the text step + finish
        probe=probe[-1] - probe[0],
        total=marks[-1] - marks[0],
        gc_seconds=gc_clock.seconds,
        page_faults=faults,
        request=request,
        lines=lines,
    )


def _step_lines(path: Path) -> list[bytes]:
    """The four lines one inner step commits, from the middle of the last run."""
    lines = path.read_bytes().splitlines()
    starts = [
        i
        for i, line in enumerate(lines)
        if b'"type":"stepAttempt"' in line and b'"step":3,' in line
    ]
    start = starts[-1]
    step = lines[start : start + 4]
    assert b'"type":"message"' in step[1] and b'"type":"toolStarted"' in step[2], step
    return step


@dataclass
class RawWork:
    """What the raw baseline does for one step, decoded beforehand."""

    transactions: list[Any]  # what json.dumps writes, one per line
    body: dict[str, Any]  # the request body of the loop run
    replies: list[bytes]  # JSON texts to parse (the response, or each SSE chunk's data)


def raw_work(run: LoopRun, stream: bool) -> RawWork:
    if stream:
        replies = [event[6:-2] for event in render_sse(1, tool=True)[:-1]]
    else:
        replies = [render_json(1, tool=True)]
    return RawWork([json.loads(line) for line in run.lines], json.loads(run.request), replies)


def raw_run(bench: Bench, work: RawWork, steps: int) -> list[float]:
    path = bench.fresh_path("raw")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    dumps, loads, write, perf = json.dumps, json.loads, os.write, time.perf_counter
    deltas = []
    settle()
    for _ in range(steps):
        start = perf()
        for obj in work.transactions:
            write(fd, (dumps(obj, separators=COMPACT, ensure_ascii=False) + "\n").encode())
        dumps(work.body, separators=COMPACT, ensure_ascii=False).encode()
        for reply in work.replies:
            loads(reply)
        deltas.append(perf() - start)
    os.close(fd)
    path.unlink()
    return deltas


# ---------------------------------------------------------------- report


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.2f} ms"


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    spreads: list[tuple[str, str, str]] = field(default_factory=list)
    parts: list[tuple[str, ...]] = field(default_factory=list)

    def addspread(
        self, name: str, ours: list[float], raw: list[float] | None, unit: Callable = us
    ) -> None:
        self.spreads.append((name, spread(ours, unit), spread(raw, unit) if raw else "—"))

    def print(self) -> None:
        print_rows(self.rows)
        print()
        print("Where the loop overhead of one step goes (median over repeats of each part's")
        print("per-step median; the parts need not add up to the total exactly):")
        print()
        print(
            "| variant | history | overhead/step | Provider.complete excl. model | "
            "4 store.commit | rest of the loop | cyclic GC per step | "
            "minor page faults per step |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for part in self.parts:
            print("| " + " | ".join(part) + " |")
        print()
        print_spreads(self.spreads)


def label(n: int) -> str:
    return f"{n:,}"


# ---------------------------------------------------------------- measurements


@dataclass
class Measured:
    history: History
    runs: list[LoopRun]
    raw: list[list[float]]  # per repeat, per-step deltas

    def overhead(self) -> float:
        return statistics.median(r.p50(lambda m: m.overhead) for r in self.runs)

    def overhead_min(self) -> float:
        """The quietest repeat (noise only ever adds time): a cross-check of the median."""
        return min(r.p50(lambda m: m.overhead) for r in self.runs)

    def part(self, part: Callable[[Mark], float]) -> float:
        return statistics.median(r.p50(part) for r in self.runs)

    def raw_p50(self) -> float:
        return statistics.median(statistics.median(d) for d in self.raw)

    def probe(self) -> float:
        return statistics.median(r.probe.overhead for r in self.runs)


def measure(bench: Bench, histories: list[History], steps: int, repeats: int) -> list[Measured]:
    """Round-robin over the histories, loop and raw interleaved, alternating who goes
    first: a noisy neighbour hits every case alike, and the flatness ratio compares
    runs made in the same minutes."""
    measured = [Measured(h, [], []) for h in histories]
    work: dict[int, RawWork] = {}
    for history in histories:
        loop_run(bench, history, steps)  # warm-up: imports, pydantic and httpx caches
    for round_ in range(repeats):
        order = measured if round_ % 2 == 0 else measured[::-1]
        for m in order:
            key = id(m)
            if round_ % 2 and key in work:
                m.raw.append(raw_run(bench, work[key], steps))
            m.runs.append(loop_run(bench, m.history, steps))
            if key not in work:
                work[key] = raw_work(m.runs[0], m.history.stream)
            if not round_ % 2:
                m.raw.append(raw_run(bench, work[key], steps))
    for m in measured:
        _check_request(m.runs[-1], m.history, steps)
    return measured


def _check_request(run: LoopRun, history: History, steps: int) -> None:
    """The kept request really carries the whole history (it is parsed, untimed)."""
    body = json.loads(run.request)
    sent = len(body["messages"])
    low = history.messages + 2  # + the probe run's user and assistant messages
    assert low < sent <= low + 2 * steps + 2, (sent, history.messages)
    assert body["stream"] is history.stream and body["tools"][0]["function"]["name"] == "lookup"


def cpu(step: Mark) -> float:
    return step.cpu_overhead


def variant(stream: bool) -> str:
    return "SSE" if stream else "JSON"


def report_variant(report: Report, small: Measured, large: Measured) -> float:
    """Adds the rows of one variant; its CPU per step at the larger history / STEP_BUDGET."""
    stream = small.history.stream
    name = variant(stream)
    for m in (small, large):
        h = m.history
        ours, raw = m.overhead(), m.raw_p50()
        report.rows.append(
            Row(
                f"{name}: loop overhead per step, {label(h.steps)} steps of history "
                f"({h.messages:,} messages; mid-run request {len(m.runs[0].request) / 1e3:,.0f} "
                "KB)",
                us(ours),
                us(raw),
                ours / raw,
                None,
            )
        )
        per_step_gc = statistics.median(r.gc_seconds / (len(r.steps) + 2) for r in m.runs)
        faults = statistics.median(r.page_faults / (len(r.steps) + 2) for r in m.runs)
        report.parts.append(
            (
                name,
                label(h.steps),
                us(ours),
                us(m.part(lambda s: s.provider - s.model)),
                us(m.part(lambda s: s.commit)),
                us(m.part(lambda s: s.overhead - (s.provider - s.model) - s.commit)),
                us(per_step_gc),
                f"{faults:,.0f}",
            )
        )
        report.addspread(
            f"{name} {label(h.steps)}: overhead per step (p50 of a run)",
            [r.p50(lambda s: s.overhead) for r in m.runs],
            [statistics.median(d) for d in m.raw],
        )
        report.addspread(
            f"{name} {label(h.steps)}: overhead per step in CPU time (p50 of a run)",
            [r.p50(cpu) for r in m.runs],
            None,
        )
        report.addspread(
            f"{name} {label(h.steps)}: model (handler) time per step",
            [r.p50(lambda s: s.model) for r in m.runs],
            None,
        )
        report.addspread(
            f"{name} {label(h.steps)}: whole run of {len(m.runs[0].steps) + 2} model steps, "
            "overhead",
            [r.total.overhead for r in m.runs],
            None,
            ms,
        )
        report.addspread(
            f"{name} {label(h.steps)}: cyclic GC during that run",
            [r.gc_seconds for r in m.runs],
            None,
            ms,
        )
    flat = large.overhead() / small.overhead()
    flat_raw = large.raw_p50() / small.raw_p50()
    report.rows.append(
        Row(
            f"**{name}: flatness, overhead per step at {label(large.history.steps)} / at "
            f"{label(small.history.steps)} steps of history**",
            f"**{flat:.2f}** ({us(small.overhead())} → {us(large.overhead())}; "
            f"quietest repeats: {large.overhead_min() / small.overhead_min():.2f})",
            f"{flat_raw:.2f} ({us(small.raw_p50())} → {us(large.raw_p50())})",
            flat,
            None,
        )
    )
    cpu_small, cpu_large = small.part(cpu), large.part(cpu)
    report.rows.append(
        Row(
            f"{name}: the same in CPU time (`thread_time`: preemption by other processes "
            "does not count, cache and memory-bandwidth contention still does)",
            f"{cpu_large / cpu_small:.2f} ({us(cpu_small)} → {us(cpu_large)})",
            "—",
            cpu_large / cpu_small,
            None,
        )
    )
    report.rows.append(
        Row(
            f"**{name}: CPU per step at {label(large.history.steps)} steps of history / 1% of "
            "a 1 s model call**",
            f"**{us(cpu_large)}**",
            us(STEP_BUDGET),
            cpu_large / STEP_BUDGET,
            1.0,
        )
    )
    p_small, p_large = small.probe(), large.probe()
    report.rows.append(
        Row(
            f"{name}: one-step `run()` (user entry, text answer, finish), "
            f"{label(large.history.steps)} / {label(small.history.steps)} steps of history",
            f"{p_large / p_small:.2f} ({us(p_small)} → {us(p_large)})",
            "—",
            p_large / p_small,
            None,
        )
    )
    report.addspread(
        f"{name} {label(small.history.steps)}: one-step run() overhead",
        [r.probe.overhead for r in small.runs],
        None,
    )
    report.addspread(
        f"{name} {label(large.history.steps)}: one-step run() overhead",
        [r.probe.overhead for r in large.runs],
        None,
    )
    report.addspread(
        f"{name} {label(large.history.steps)}: `store.load()` in run() (snapshot copy)",
        [r.probe.load for r in large.runs],
        None,
    )
    return cpu_large / STEP_BUDGET


# ---------------------------------------------------------------- profiles


def profile(bench: Bench, histories: list[History], steps: int, repeats: int) -> None:
    """cProfile of the timed runs (JSON variant) at the largest history; then, per
    function, the own time per step at the largest minus at the smallest history."""
    own: dict[int, dict[tuple[str, int, str], float]] = {}
    for history in (histories[-1], histories[0]):
        profiler = cProfile.Profile()
        n_steps = 0
        gc_seconds = 0.0
        with GcClock() as gc_clock:
            for _ in range(repeats):
                path = bench.fresh_path("profile")
                shutil.copyfile(history.path, path)
                harness = Harness(path, bench.workspace, history.stream, bench.budget)
                harness.model.enqueue(steps)
                settle()  # the objects of the load just done: not this run's collections
                gc_before = gc_clock.seconds
                profiler.enable()
                harness.loop.run(PROMPT)
                profiler.disable()
                gc_seconds += gc_clock.seconds - gc_before
                n_steps += steps + 1
                harness.close()
                path.unlink()
        stats = pstats.Stats(profiler)
        own[history.steps] = {
            func: row[2] / n_steps
            for func, row in stats.stats.items()  # type: ignore[attr-defined]
        }
        if history is histories[-1]:
            title = (
                f"{repeats} runs of {steps} tool steps + text, {variant(history.stream)}, "
                f"{label(history.steps)} steps of history"
            )
            for order, top in (("cumulative", 25), ("tottime", 15)):
                print(f"\n### cProfile: {title}, top {top} by {order}\n")
                print("```")
                pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats(
                    order
                ).print_stats(top)
                print("```")
            print(
                f"\nThe cyclic GC ran {ms(gc_seconds)} of this; cProfile charges each "
                "collection to the call that happened to allocate when it started."
            )
    large, small = own[histories[-1].steps], own[histories[0].steps]
    growth = sorted(
        ((large.get(k, 0.0) - small.get(k, 0.0), k) for k in large.keys() | small.keys()),
        reverse=True,
    )
    print(
        f"\n### Own time per model step that grows with history "
        f"({label(histories[0].steps)} → {label(histories[-1].steps)} steps, profiled)\n"
    )
    print("| function | at small | at large | growth |")
    print("|---|---|---|---|")
    for delta, key in growth[:12]:
        where = f"{Path(key[0]).name}:{key[1]}({key[2]})"
        at_small, at_large = us(small.get(key, 0.0)), us(large.get(key, 0.0))
        print(f"| `{where}` | {at_small} | {at_large} | {us(delta)} |")


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--histories",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=[10, 1000],
        help="steps of history to measure at: the first and the last are compared "
        "(default 10,1000)",
    )
    parser.add_argument(
        "--steps", type=int, help="tool steps per timed run (default 20; --quick: 10)"
    )
    parser.add_argument(
        "--repeats", type=int, help="timed runs per history and variant (default 9; --quick: 3)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter runs")
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile the largest-history case"
    )
    parser.add_argument("--dir", help="where the temporary session files go (default: $TMPDIR)")
    parser.add_argument(
        "--budget",
        type=float,
        help="run with TinyAgent.budget set to this many USD (high enough never to stop a "
        "run), so the budget check before each attempt is timed too",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    histories_at = sorted(args.histories)
    steps = args.steps or (10 if args.quick else 20)
    if steps < 4:
        raise SystemExit("--steps must be at least 4 (inner steps are measured between two)")
    repeats = args.repeats or (3 if args.quick else 9)
    report = Report()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-loop-", dir=args.dir) as tmp:
        workspace = Path(tmp, "work")
        workspace.mkdir()
        bench = Bench(Path(tmp), workspace.resolve(), args.budget)
        print(f"# tiny-agent-nb agent loop overhead benchmark, {now()}\n")
        print(
            f"tiny-agent-nb {revision()}, python {platform.python_version()}, "
            f"pydantic {pydantic.VERSION}, httpx {httpx.__version__}, "
            f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.2f}, files in {tmp}\n"
        )
        print(
            f"- {steps} tool steps + 1 text step per timed run, {repeats} repeats per case; "
            f"tool result {len(RESULT.encode()):,} B, SSE pieces of {SSE_PIECE} characters "
            f"({len(render_sse(1, tool=True))} events per tool-call answer); "
            f"budget {'none' if args.budget is None else f'${args.budget:g} (checked per attempt)'}"
        )
        shares: dict[str, float] = {}
        json_histories: list[History] = []
        for stream in (False, True):
            histories = [build_history(bench, n, stream) for n in histories_at]
            measured = measure(bench, histories, steps, repeats)
            for m in measured:
                h = m.history
                print(
                    f"- {variant(stream)}, {h.steps:,} steps of history: {h.messages:,} "
                    f"messages, session file {h.path.stat().st_size / 1e6:.2f} MB, "
                    f"overhead p50 {us(m.overhead())}/step"
                )
                if stream:
                    h.path.unlink()
            if not stream:
                json_histories = histories
            shares[variant(stream)] = report_variant(report, measured[0], measured[-1])
        print()
        report.print()
        print()
        for name, share in shares.items():
            verdict = "met" if share <= 1.0 else "NOT met"
            print(
                f"KEY FIGURE ({name}): loop CPU per step at {label(histories_at[-1])} steps of "
                f"history / 1% of a 1 s model call = {share:.2f} (target ≤ 1: {verdict})"
            )
        print(
            f"\ntotal {time.perf_counter() - started:.0f} s, "
            f"load average now {os.getloadavg()[0]:.2f}"
        )
        if args.profile:
            profile(bench, json_histories, steps, repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
