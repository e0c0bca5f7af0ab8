"""Benchmark Run All's replayed `%%agent` cells and the wait before a cell's first request.

    python bench/bench_replay.py                  # sessions of 10, 100 and 1,000 earlier runs
    python bench/bench_replay.py --quick          # 10 earlier runs, 2 repeats
    python bench/bench_replay.py --sizes 1000 --repeats 9 --profile
    python bench/bench_replay.py --targets        # exit 1 when a target is missed
    python bench/bench_replay.py --dir /mnt/ssd   # where the sessions are written

Everything runs in this process, in real IPython `InteractiveShell`s (a fresh one per
kernel start, as tests/helpers/ipython_shell.py makes them: plain-text output, captured)
over a loopback OpenAI-compatible server (tests/helpers/openai_server.py) that stamps the
moment each request's first line arrives. Per size, a notebook's session holds N earlier
runs (each two `python` calls and an answer, with their cell ids and options), then a
recording kernel runs a 20-cell notebook of `%%agent` cells with cell ids, each of one of
six shapes: 0, 3 or 20 `python` calls (in steps of up to 5) and a short or a ~3 KB answer.

(a) Replays (docs/spec.md §12). A restarted kernel's Run All of the 20 cells (every one
replayed: no request reaches the server), against the baseline measured in the same run:
a restarted kernel running the cells' `python` calls as plain cells, one cell per call.
Then, in that kernel, each shape's cell replayed again, interleaved with its baseline
(which goes first alternates), the fastest of each. Target: a replay costs ≤ 50 ms over
its baseline, so a 20-cell Run All adds under a second.

(b) The wait before the first token: an `%%agent` cell with a new prompt, from the start
of `run_cell` to the server reading the first line of its chat request. CPU is this
thread's (`time.thread_time` at the start; the same thread's CPU clock read by the server
when the request is in, while the thread waits for the answer); wall is the server's
stamp. Baseline, interleaved: a plain cell posting the very bytes of the agent's request
through a warm httpx client to the same server. The agent's own time is the difference;
target ≤ 20 ms of CPU. A kernel's first request (its HTTP client made, the model's window
asked from `GET /models`) is shown apart.

Targets are on CPU time (the machine is shared: preemption does not count in it); wall is
shown beside. It is a report: it exits 0 unless `--targets` is given and one is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import os
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import httpx
import pytest
from _report import Row, now, print_rows, print_spreads, revision, settle, spread
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.session import RunOptions, SessionStore, new_id
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.tools import builtin_registry

from helpers.ipython_shell import fresh_shell, served
from helpers.openai_server import (
    OpenAIServer,
    model_entry,
    text_reply,
    tool_call,
    tool_calls_reply,
)
from helpers.scenario import Run

KEY = "sk-bench-replay"
REPLAYED = "↻ replayed from the session: 0 model calls, $0"  # notebook/_rerun.py
CELLS = 20
SHAPES = [(calls, answer) for calls in (0, 3, 20) for answer in ("short", "long")]
STEP_CALLS = 5
SHORT = "Done: the names are defined."
LONG = "\n\n".join(
    f"## Part {n}\n\nThe parser reads each line, keeps its fields and checks them: "
    f"`fields[{n}]` holds the value.\n\n| name | value |\n|---|---|\n| a{n} | {n * 7} |\n\n"
    f"```python\nvalue_{n} = parse(line)[{n}]\n```"
    for n in range(16)
)  # ~3 KB of markdown
TARGET_REPLAY_MS = 50.0
TARGET_RUN_ALL_MS = 1000.0
TARGET_FIRST_REQUEST_MS = 20.0
WINDOW = 10_000_000  # tokens: no compaction before a request, whatever the size


def code_of(cell: int, call: int) -> str:
    return f"v{cell}_{call} = [k * k for k in range({call + 10})]"


@dataclass(frozen=True)
class Cell:
    index: int
    calls: int
    answer: str

    @property
    def cell_id(self) -> str:
        return f"cell-{self.index:02}"

    @property
    def source(self) -> str:
        return f"%%agent\nCell {self.index}: define {self.calls} lists and explain them."

    @property
    def shape(self) -> str:
        return f"{self.calls} python calls, {self.answer} answer"

    def codes(self) -> list[str]:
        return [code_of(self.index, j) for j in range(self.calls)]


NOTEBOOK = [Cell(i, *SHAPES[i % len(SHAPES)]) for i in range(CELLS)]


# ---------------------------------------------------------------- the server and kernels


@dataclass
class Stamps:
    """What the server saw of the measured thread when a request was in."""

    thread: int
    cpu: list[float] = field(default_factory=list)  # its CPU clock, per request answered

    def responder(self, body: Any) -> dict[str, Any]:
        # The thread waits for this answer: its CPU clock stopped when the request was sent.
        self.cpu.append(time.clock_gettime(time.pthread_getcpuclockid(self.thread)))
        return text_reply("Fine.")


def quiet(shell: InteractiveShell, code: str, cell_id: str | None = None) -> str:
    """Run a cell that must not fail; what it printed."""
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        result = shell.run_cell(code, cell_id=cell_id)
    out = said.getvalue()
    if result.error_in_exec is not None or result.error_before_exec is not None:
        raise RuntimeError(f"the cell failed:\n{code}\n{out}")
    if "Traceback" in out:
        raise RuntimeError(f"the cell printed a traceback:\n{code}\n{out}")
    return out


@contextlib.contextmanager
def kernel(directory: Path, server: OpenAIServer) -> Iterator[InteractiveShell]:
    """A kernel (re)started on the notebook in `directory`: a fresh shell, the extension
    loaded; unloaded at the end (the session's lock let go)."""
    with pytest.MonkeyPatch.context() as patch:
        shells = fresh_shell(directory, patch, served(server.base_url, KEY))
        shell = next(shells)
        quiet(shell, "%load_ext tiny_agent_nb")
        try:
            yield shell
        finally:
            next(shells, None)


def runtime_of(shell: InteractiveShell) -> Any:
    return shell.magics_manager.registry["AgentMagics"].runtime


# ---------------------------------------------------------------- the session


def add_earlier_runs(store: SessionStore, runs: int) -> None:
    """`runs` completed runs of other cells: two `python` calls each, then an answer."""
    python = builtin_registry().get("python")
    assert python is not None
    options = RunOptions(
        approve="auto", tools=list(builtin_registry().names), budget=None, maxSteps=20, model="m"
    )
    for i in range(runs):
        run = Run(environment=store.header.environmentIdentity)
        entry_id = new_id()
        prompt = f.user_message(f"Earlier cell {i}: load the data and count the rows.", id=entry_id)
        started = f.run_started(run.operation_id, entry_id, options, cell_id=f"earlier-{i}")
        store.commit([prompt, started])
        store.commit(run.attempt())
        calls = [(f"e{i}_{j}", "python", {"code": f"rows_{j} = {j} * 100"}) for j in range(2)]
        store.commit(run.answer(None, calls))
        for call_id, _, arguments in calls:
            intent = run.intent(call_id, python.identity, arguments)
            store.commit([intent])
            store.commit([run.result(intent, "")])
        store.commit(run.attempt())
        store.commit(run.answer(f"Earlier cell {i}: 200 rows in two tables. " * 6))
        store.commit(run.finish())


def record(directory: Path, server: OpenAIServer, earlier: int) -> None:
    """The session: `earlier` runs, then the notebook's cells asked once, as recorded."""
    with kernel(directory, server) as shell:
        add_earlier_runs(runtime_of(shell).require_store(), earlier)
        for cell in NOTEBOOK:
            calls = [
                tool_call(f"c{cell.index}_{j}", "python", {"code": code})
                for j, code in enumerate(cell.codes())
            ]
            steps = [calls[s : s + STEP_CALLS] for s in range(0, len(calls), STEP_CALLS)]
            server.enqueue(*(tool_calls_reply(*step) for step in steps))
            server.enqueue(text_reply(SHORT if cell.answer == "short" else LONG))
            quiet(shell, cell.source, cell.cell_id)
        if server.pending_replies:
            raise RuntimeError("the recording did not ask every scripted reply")


# ---------------------------------------------------------------- what is timed


@dataclass
class Timed:
    cpu: float
    wall: float


def timed(what: Callable[[], object]) -> Timed:
    settle()
    c, w = time.thread_time(), time.perf_counter()
    what()
    return Timed(time.thread_time() - c, time.perf_counter() - w)


def replay(shell: InteractiveShell, cell: Cell) -> None:
    out = quiet(shell, cell.source, cell.cell_id)
    if REPLAYED not in out:
        raise RuntimeError(f"{cell.cell_id} was not replayed:\n{out}")


def plain(shell: InteractiveShell, cell: Cell) -> None:
    for code in cell.codes():
        quiet(shell, code)


def run_all(directory: Path, server: OpenAIServer, *, replayed: bool) -> Timed:
    """A restarted kernel's Run All: the agent cells replayed, or (the baseline) their
    python calls as plain cells."""
    with kernel(directory, server) as shell:
        asked = len(server.requests)
        total = [
            timed(functools.partial(replay if replayed else plain, shell, c)) for c in NOTEBOOK
        ]
        if len(server.requests) != asked:
            raise RuntimeError("a replay sent a request")
    return Timed(sum(t.cpu for t in total), sum(t.wall for t in total))


@dataclass
class Asked:
    """Cell start to the chat request's first line at the server."""

    cpu: float
    wall: float


def first_request(
    shell: InteractiveShell, server: OpenAIServer, stamps: Stamps, code: str, cell_id: str | None
) -> Asked:
    asked = len(server.requests)
    settle()
    c, w = time.thread_time(), time.perf_counter()
    quiet(shell, code, cell_id)
    requests = server.requests[asked:]
    if len(requests) != 1:
        raise RuntimeError(f"{len(requests)} chat requests, not 1, for:\n{code}")
    return Asked(stamps.cpu[-1] - c, requests[0].arrived - w)


@dataclass
class Size:
    earlier: int
    file_bytes: int = 0
    run_all: list[Timed] = field(default_factory=list)
    run_all_base: list[Timed] = field(default_factory=list)
    cells: dict[str, list[Timed]] = field(default_factory=dict)
    cells_base: dict[str, list[Timed]] = field(default_factory=dict)
    first_in_kernel: list[Asked] = field(default_factory=list)
    asked: list[Asked] = field(default_factory=list)
    posted: list[Asked] = field(default_factory=list)
    request_bytes: int = 0


def measure(
    directory: Path, server: OpenAIServer, stamps: Stamps, size: Size, repeats: int
) -> None:
    for r in range(repeats):  # Run All and its baseline, each in a restarted kernel
        for replayed in (True, False) if r % 2 == 0 else (False, True):
            side = size.run_all if replayed else size.run_all_base
            side.append(run_all(directory, server, replayed=replayed))
    with kernel(directory, server) as shell:
        quiet(shell, "\n".join(code for c in NOTEBOOK for code in c.codes()))
        shapes = NOTEBOOK[: len(SHAPES)]
        for r in range(repeats):
            for cell in shapes:
                sides = [("replay", replay), ("plain", plain)]
                for name, how in sides if r % 2 == 0 else sides[::-1]:
                    where = size.cells if name == "replay" else size.cells_base
                    where.setdefault(cell.shape, []).append(
                        timed(functools.partial(how, shell, cell))
                    )
        # A prompt no cell asked before: the kernel's first request, then the others.
        size.first_in_kernel.append(
            first_request(shell, server, stamps, "%%agent\nWhich lists exist?", "ask-0")
        )
        client = httpx.Client()
        url = f"{server.base_url}/chat/completions"
        headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
        body = [b""]
        shell.user_ns["_bench_post"] = lambda: client.post(url, content=body[0], headers=headers)
        try:
            for r in range(1, repeats + 1):
                body[0] = server.requests[-1].raw  # the agent's latest request
                size.request_bytes = len(body[0])
                sides = [("agent", f"%%agent\nQuestion {r}: which lists exist?"), ("post", "")]
                for name, code in sides if r % 2 else sides[::-1]:
                    if name == "agent":
                        size.asked.append(first_request(shell, server, stamps, code, f"ask-{r}"))
                    else:
                        size.posted.append(
                            first_request(shell, server, stamps, "_bench_post()", None)
                        )
        finally:
            client.close()


def profile(directory: Path, server: OpenAIServer, repeats: int) -> None:
    """cProfile of replayed cells and of asks, in one kernel."""
    with kernel(directory, server) as shell:
        for cell in NOTEBOOK:  # warm
            replay(shell, cell)
        quiet(shell, "%%agent\nWarm up.", "warm")
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(repeats):
            for cell in NOTEBOOK:
                replay(shell, cell)
        profiler.disable()
        print(f"### cProfile: {repeats} x the {CELLS} cells replayed (cumulative, top 30)")
        print("```")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        print("```")
        profiler = cProfile.Profile()
        profiler.enable()
        for r in range(repeats):
            quiet(shell, f"%%agent\nProfiled question {r}.", f"profiled-{r}")
        profiler.disable()
        print(f"### cProfile: {repeats} asks (cumulative, top 30)")
        print("```")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        print("```")


# ---------------------------------------------------------------- the report


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def best(values: Sequence[Timed | Asked], kind: str) -> float:
    return min(getattr(v, kind) for v in values)


def rows_of(size: Size) -> tuple[list[Row], list[tuple[str, str, str]]]:
    n = f"{size.earlier:,} earlier runs"
    rows: list[Row] = []
    spreads: list[tuple[str, str, str]] = []

    def added(metric: str, ours: list[Any], base: list[Any], target: float | None) -> None:
        for kind in ("cpu", "wall"):
            o, b = best(ours, kind), best(base, kind)
            over = (o - b) * 1000
            t = target if kind == "cpu" else None
            # The ratio is to the target: what the agent adds, over what it may add.
            rows.append(
                Row(
                    f"{n}: {metric}, {kind.upper() if kind == 'cpu' else kind}",
                    f"{ms(o)} ({over:+,.1f} ms)",
                    ms(b),
                    over / t if t else None,
                    1.0 if t else None,
                )
            )
            unit = ms
            spreads.append(
                (
                    f"{n}: {metric}, {kind}",
                    spread([getattr(v, kind) for v in ours], unit),
                    spread([getattr(v, kind) for v in base], unit),
                )
            )

    added(f"Run All of {CELLS} replayed cells", size.run_all, size.run_all_base, TARGET_RUN_ALL_MS)
    for shape, ours in size.cells.items():
        added(f"a replayed cell, {shape}", ours, size.cells_base[shape], TARGET_REPLAY_MS)
    added(
        f"cell start to the first request ({size.request_bytes / 1000:,.0f} KB)",
        size.asked,
        size.posted,
        TARGET_FIRST_REQUEST_MS,
    )
    first = size.first_in_kernel
    rows.append(
        Row(
            f"{n}: a kernel's first request (client made, window asked), CPU / wall",
            f"{ms(best(first, 'cpu'))} / {ms(best(first, 'wall'))}",
            "—",
            None,
            None,
        )
    )
    return rows, spreads


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", help="earlier runs in the session (default 10,100,1000)")
    parser.add_argument("--repeats", type=int, help="(default 5)")
    parser.add_argument("--quick", action="store_true", help="default 10 earlier runs, 2 repeats")
    parser.add_argument("--profile", action="store_true", help="+ cProfile at the largest size")
    parser.add_argument("--targets", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--dir", type=Path, default=None, help="where the sessions are written")
    args = parser.parse_args(argv)
    # An explicit --sizes or --repeats wins over --quick's.
    args.sizes = args.sizes or ("10" if args.quick else "10,100,1000")
    args.repeats = args.repeats or (2 if args.quick else 5)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = [Size(int(s)) for s in args.sizes.split(",")]
    stamps = Stamps(threading.get_ident())
    load = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(dir=args.dir) as tmp,
        OpenAIServer(api_key=KEY, models=[model_entry(context_length=WINDOW)]) as server,
    ):
        server.responder = stamps.responder
        dirs = {s.earlier: Path(tmp) / f"runs-{s.earlier}" for s in sizes}
        for size in sizes:
            dirs[size.earlier].mkdir()
            record(dirs[size.earlier], server, size.earlier)
            size.file_bytes = (dirs[size.earlier] / "analysis.agent.jsonl").stat().st_size
        for size in sizes:
            measure(dirs[size.earlier], server, stamps, size, args.repeats)
        if args.profile:
            profile(dirs[sizes[-1].earlier], server, args.repeats)
        after = os.getloadavg()
    print(f"# Replayed cells and the first request, {now()}, {revision()}")
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, load {load[0]:.2f} -> "
        f"{after[0]:.2f}, {args.repeats} repeats; the fastest of each side; the ratio is "
        "what the agent adds over its target"
    )
    print()
    rows: list[Row] = []
    spreads: list[tuple[str, str, str]] = []
    for size in sizes:
        print(f"- {size.earlier:,} earlier runs: session file {size.file_bytes / 1e6:,.2f} MB")
        r, s = rows_of(size)
        rows += r
        spreads += s
    print()
    print_rows(rows)
    print()
    print_spreads(spreads)
    missed = [r.metric for r in rows if r.verdict() == "FAIL"]
    return 1 if args.targets and missed else 0


if __name__ == "__main__":
    sys.exit(main())
