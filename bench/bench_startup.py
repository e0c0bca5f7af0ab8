"""`%load_ext tiny_agent_nb` in a fresh IPython, on a session a dead kernel left open.

    python bench/bench_startup.py                    # 10k and 100k facts, 3 repetitions
    python bench/bench_startup.py --quick            # 1k and 5k facts, 1 repetition
    python bench/bench_startup.py --sizes 10000 --repeats 5 --dir /mnt/ssd
    python bench/bench_startup.py --memory-sites     # + where the 100k session's memory goes
    python bench/bench_startup.py --bytecode         # as a kernel: bytecode cached
    python bench/bench_startup.py --peer /path/to/venv/bin/python  # + `%load_ext
                                                # jupyter_ai_magics` in that Python, the ratio

The session is the notebook's mix: cells of a prompt, ten `read_file`
tool steps with 1 KB results (bench_peers' workload), the final answer and its usage, the
last run left open by a kernel killed during a `bash` call (an intent that is never
replayed). Each measurement starts a new Python process (nothing imported, no caches
warm) holding an `IPython` `InteractiveShell` whose notebook the session belongs to, on
the offline demo model (no key), and times:

- import: `import tiny_agent_nb.notebook`, what `%load_ext` imports;
- open: `NotebookRuntime._open_store` (the lock, reading and reducing the file);
- recovery: `NotebookRuntime._recover` (settling the run the dead kernel left open);
- report: the rest of `%load_ext` (the open report and its text, the magics);
- and then what the first request of the first `%%agent` cell does before it is sent:
  build the model's context as the OpenAI-compatible provider sends it
  (`messages.encode(build_context(...))`, what every request does).

Memory is the session's: resident memory after `%load_ext` minus before it (the
import done), the peak resident memory during it (VmHWM, reset before it), and what
tracemalloc holds after it (a separate process: tracing slows everything down; with the
context built). Targets:
import + open + recovery + report ≤ 300 ms at 10k facts and ≤ 1 s at 100k; memory ≤ 5.5x
the file (a state keeps the entries it validated, docs/session-format.md §8.1).
Repetitions alternate the sizes. It is a report, not a test: it exits 0.

Each process opens the session from its file alone (the only store). `--peer PYTHON`
also starts, alternating with ours, fresh processes of PYTHON (an environment with
jupyter-ai-magics and IPython) that time `%load_ext jupyter_ai_magics` the same way (CPU,
its import included), and prints the ratio of ours to it (target ≤ 0.5 at 10k facts:
jupyter-ai loads no history at all). `--bytecode` gives the processes the package's bytecode in a
temporary PYTHONPYCACHEPREFIX, warmed by one process first, as a user's kernel has it:
where PYTHONDONTWRITEBYTECODE is set, each process compiles the package, and what that
frees the load then reuses, so a process keeps less than a kernel. Each state's C heap
after `%load_ext` (glibc's `mallinfo2`: in use, free, memory-mapped blocks) is reported.
"""

from __future__ import annotations

# Nothing of tiny_agent_nb at the top: the child mode (`--child`) must start clean.
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOTEBOOK = "analysis.ipynb"
SESSION = "analysis.agent.jsonl"  # notebook/_links.py: session_file_for
PRISTINE = "left-open.jsonl"  # the session as the dead kernel left it
STEPS_PER_RUN = 10
TARGET_MS = {10_000: 300.0, 100_000: 1000.0}  # docs/benchmarks.md, "Start-up"
TARGET_MEMORY = 5.5  # docs/benchmarks.md, "Start-up and memory"


# ---------------------------------------------------------------- the session


def build(directory: Path, facts: int) -> Path:
    """A session of about `facts` facts, its last run open (killed during `bash`)."""
    sys.path.insert(0, str(HERE))
    from bench_peers import DIGEST, MODEL, TOOL, Workload, commit_tool_call  # noqa: PLC0415

    from tiny_agent_nb.session import (  # noqa: PLC0415
        HeaderInit,
        SessionStore,
        ToolCall,
        new_id,
    )
    from tiny_agent_nb.session import facts as f  # noqa: PLC0415
    from tiny_agent_nb.tools import builtin_registry  # noqa: PLC0415

    bash = builtin_registry().get("bash")
    assert bash is not None
    work, env, path = Workload(), str(directory), directory / PRISTINE
    init = HeaderInit(cwd=env, provider="openrouter", model=MODEL, environment_identity=env)
    step = 0

    with SessionStore.open(path, create=init) as store:

        def attempt(operation_id: str, n: int) -> str:
            attempt_id = new_id()
            label = {"provider": "openrouter", "model": MODEL, "configurationDigest": DIGEST}
            attempt = f.StepAttempt(operationId=operation_id, step=n, attempt=1, **label)
            store.commit([f.NewFact(attempt, attempt_id)])
            return attempt_id

        def answer(attempt_id: str, text: str, calls: list[ToolCall]) -> None:
            reason = "tool_calls" if calls else "stop"
            message = f.assistant_message(
                attempt_id,
                content=text,
                tool_calls=calls,
                reasoning=None,
                refusal=None,
                finish_reason=reason,
            )
            spent = f.usage(
                attempt_id=attempt_id, input_tokens=1200 + 30 * step, output_tokens=40, cost=0.004
            )
            store.commit([message, spent])

        # A cell's run: [prompt, runStarted], per step 5 facts in 4 commits, the final
        # answer (3 facts), operationFinished.
        per_run = 2 + 5 * STEPS_PER_RUN + 3 + 1
        for _ in range(max(1, (facts - 7) // per_run)):
            operation_id, entry_id = new_id(), new_id()
            prompt = f.user_message(f"cell {step}: find why the parser fails", id=entry_id)
            store.commit([prompt, f.run_started(operation_id, entry_id)])
            for n in range(1, STEPS_PER_RUN + 1):
                step += 1
                s = work.step(step)
                attempt_id = attempt(operation_id, n)
                call = ToolCall(id=s.call_id, name=TOOL.name, arguments=s.arguments)
                answer(attempt_id, s.text, [call])
                commit_tool_call(
                    store, call, s.result, operation_id=operation_id, attempt_id=attempt_id, env=env
                )
            answer(attempt(operation_id, STEPS_PER_RUN + 1), "Fixed: the trailing comma.", [])
            store.commit(
                [f.NewFact(f.OperationFinished(operationId=operation_id, outcome="completed"))]
            )
        # The kernel dies while `bash` runs: recovery marks the call interrupted.
        operation_id, entry_id = new_id(), new_id()
        store.commit([f.user_message("run the tests", id=entry_id)])
        store.commit([f.run_started(operation_id, entry_id)])
        attempt_id = attempt(operation_id, 1)
        call = ToolCall(id="call_last", name="bash", arguments={"command": "pytest -q"})
        answer(attempt_id, "Running the tests.", [call])
        store.commit(
            [
                f.tool_started(
                    operation_id,
                    attempt_id,
                    call.id,
                    tool=bash.identity,
                    arguments={"command": "pytest -q"},
                    replay_policy="never",
                    environment_identity=env,
                )
            ]
        )
    return path


# ---------------------------------------------------------------- the fresh process


def _status(field: str) -> int:
    """A /proc/self/status memory field, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def _heap() -> dict[str, int]:
    """glibc's `mallinfo2`: the main heap's bytes in use and free, the bytes in blocks of
    their own memory maps, the arenas' total; {} elsewhere."""
    import ctypes  # noqa: PLC0415

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    try:
        libc = ctypes.CDLL(None)
        call = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    call.restype = MallInfo2
    info = call()
    return {
        "heap": info.arena,
        "in_use": info.uordblks,
        "free": info.fordblks,
        "mapped": info.hblkhd,
    }


def _site(frames: Any) -> str:
    """The allocating line, then the package's own frames that led to it (newest first)."""
    where = [f"{Path(f.filename).name}:{f.lineno}" for f in reversed(frames)]
    ours = [
        f"{Path(f.filename).name}:{f.lineno}"
        for f in reversed(frames)
        if "tiny_agent_nb" in f.filename
    ]
    return " ← ".join(dict.fromkeys([where[0], *ours[:4]]))


def child(directory: Path, trace: int) -> dict[str, Any]:
    """In a new process: one `%load_ext` in a fresh shell, timed and weighed."""
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415
    import time  # noqa: PLC0415
    import tracemalloc  # noqa: PLC0415

    os.chdir(directory)
    os.environ["JPY_SESSION_NAME"] = str(directory / NOTEBOOK)
    os.environ["IPYTHONDIR"] = str(directory / ".ipython")
    for name in ("TINY_AGENT_API_KEY", "OPENROUTER_API_KEY", "TINY_AGENT_BASE_URL"):
        os.environ.pop(name, None)  # the offline demo model: no HTTP client at start-up
    from IPython.core.interactiveshell import InteractiveShell  # noqa: PLC0415

    shell = InteractiveShell.instance()
    cpu, wall = time.process_time, time.perf_counter
    timed: dict[str, float] = {}

    c0, w0 = cpu(), wall()
    from tiny_agent_nb.notebook import NotebookRuntime  # noqa: PLC0415  (what %load_ext imports)

    timed["import"], timed["import_wall"] = cpu() - c0, wall() - w0

    def timing(name: str, method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            c, w = cpu(), wall()
            try:
                return method(*args, **kwargs)
            finally:
                timed[name], timed[name + "_wall"] = cpu() - c, wall() - w

        return wrapper

    NotebookRuntime._open_store = timing("open", NotebookRuntime._open_store)  # type: ignore[method-assign]
    NotebookRuntime._recover = timing("recovery", NotebookRuntime._recover)  # type: ignore[method-assign]
    import gc  # noqa: PLC0415

    gc.collect()
    heap_before = _heap()
    rss_before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS, so the peak is ours
    if trace:
        tracemalloc.start(trace)
    traced_before = tracemalloc.get_traced_memory()[0] if trace else 0
    said = io.StringIO()
    c0, w0 = cpu(), wall()
    with contextlib.redirect_stdout(said):
        shell.run_line_magic("load_ext", "tiny_agent_nb")
    timed["load_ext"], timed["load_ext_wall"] = cpu() - c0, wall() - w0
    result: dict[str, Any] = {
        "timed": timed,
        "rss": _status("VmRSS") - rss_before,
        "peak": _status("VmHWM") - rss_before,
        "said": said.getvalue(),
        "httpx": "httpx" in sys.modules,
        "heap": {k: v - heap_before[k] for k, v in _heap().items()},
    }
    if trace:
        result["traced"] = tracemalloc.get_traced_memory()[0] - traced_before
        result["traced_peak"] = tracemalloc.get_traced_memory()[1] - traced_before
    # What the first cell's first request does before it is sent: build the model's
    # context. (A demo-model cell would not show it: its small window compacts first.)
    from tiny_agent_nb.agent import build_context  # noqa: PLC0415 (after the timed import)
    from tiny_agent_nb.provider import messages  # noqa: PLC0415

    agent = shell.magics_manager.registry["AgentMagics"].runtime
    c0, w0 = cpu(), wall()
    sent = messages.encode(build_context(agent.require_store().load(), None))
    timed["cell"], timed["cell_wall"] = cpu() - c0, wall() - w0
    result["context_bytes"] = len(sent)
    result["cell_rss"] = _status("VmRSS") - rss_before
    result["cell_heap"] = {k: v - heap_before[k] for k, v in _heap().items()}
    if trace:
        snapshot = tracemalloc.take_snapshot()
        result["cell_traced"] = tracemalloc.get_traced_memory()[0] - traced_before
        result["sites"] = [
            (_site(s.traceback), s.size, s.count)
            for s in snapshot.statistics("traceback" if trace > 1 else "lineno")[:25]
        ]
    return result


def child_env(pycache: Path | None) -> dict[str, str] | None:
    """The processes' environment: with `pycache`, bytecode read and written there."""
    if pycache is None:
        return None
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(pycache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


PEER = """
import os, sys, time
os.chdir(sys.argv[1])
os.environ["IPYTHONDIR"] = os.path.join(sys.argv[1], ".ipython")
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
start = time.process_time()
shell.run_line_magic("load_ext", "jupyter_ai_magics")
print(time.process_time() - start)
"""


def measure_peer(python: str, directory: Path) -> float:
    """CPU seconds of `%load_ext jupyter_ai_magics`, its import included, in a fresh
    process of `python`."""
    done = subprocess.run(
        [python, "-c", PEER, str(directory)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return float(done.stdout.splitlines()[-1])


def measure(directory: Path, trace: int = 0, *, pycache: Path | None = None) -> dict[str, Any]:
    # Every process recovers the same open run: the file as the dead kernel left it.
    shutil.copyfile(directory / PRISTINE, directory / SESSION)
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(directory), "--trace", str(trace)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env=child_env(pycache),
    )
    if done.returncode != 0:
        raise RuntimeError(f"the fresh process failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    if "marked interrupted" not in result["said"]:
        raise RuntimeError(f"no recovery was reported:\n{result['said']}")
    return result


# ---------------------------------------------------------------- the report


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def mb(size: float) -> str:
    return f"{size / 1e6:,.1f} MB"


def label(facts: int) -> str:
    return f"{facts // 1000}k facts" if facts % 1000 == 0 else f"{facts:,} facts"


def report(facts: int, size: int, runs: list[dict[str, Any]], traced: dict[str, Any]) -> None:
    def med(key: str) -> float:
        return statistics.median(r["timed"][key] for r in runs)

    def every(key: str) -> str:
        return ", ".join(f"{r['timed'][key] * 1000:.0f}" for r in runs)

    total = med("import") + med("load_ext")
    target = TARGET_MS.get(facts)
    name = f"{label(facts)} ({mb(size)})"
    wall = med("import_wall") + med("load_ext_wall")
    rows = [
        (f"{name}: %load_ext with its import, CPU", ms(total), target),
        (f"{name}: %load_ext with its import, wall", ms(wall), target),
    ]
    print(f"### {name}")
    print()
    print("| metric | tiny-agent-nb | budget / file | ratio | target | result |")
    print("|---|---|---|---|---|---|")
    for metric, ours, budget in rows:
        seconds = float(ours.split()[0].replace(",", "")) / 1000
        if budget is None:
            print(f"| {metric} | {ours} | — | — | — | info |")
        else:
            ratio = seconds * 1000 / budget
            verdict = "PASS" if ratio <= 1 else "FAIL"
            print(f"| {metric} | {ours} | {budget:,.0f} ms | {ratio:.2f}x | ≤ 1 | {verdict} |")
    for metric, value in (
        ("resident memory kept (RSS after - before)", statistics.median(r["rss"] for r in runs)),
        ("peak resident memory (VmHWM - RSS before)", statistics.median(r["peak"] for r in runs)),
        ("held by Python objects (tracemalloc)", traced["traced"]),
        ("tracemalloc peak", traced["traced_peak"]),
        (
            "RSS with the context built (first request)",
            statistics.median(r["cell_rss"] for r in runs),
        ),
        ("tracemalloc with the context built", traced["cell_traced"]),
    ):
        ratio = value / size
        verdict = "PASS" if ratio <= TARGET_MEMORY else "FAIL"
        print(
            f"| {name}: {metric} | {mb(value)} | {mb(size)} | {ratio:.2f}x | "
            f"≤ {TARGET_MEMORY:g} | {verdict} |"
        )
    print()
    if runs[0]["heap"]:
        print("| C heap (`mallinfo2`, change over `%load_ext`) | in use | free | in own maps |")
        print("|---|---|---|---|")
        for when, key in (("after `%load_ext`", "heap"), ("with the context built", "cell_heap")):
            cells = [
                mb(statistics.median(r[key][part] for r in runs))
                for part in ("in_use", "free", "mapped")
            ]
            print(f"| {when} | {' | '.join(cells)} |")
        print()
    print("| part (CPU, median; every run in ms) | time |")
    print("|---|---|")
    for r in runs:
        t = r["timed"]
        t["rest"] = t["load_ext"] - t["open"] - t["recovery"]
    for part, key in (
        ("import `tiny_agent_nb.notebook`", "import"),
        ("open the store (`_open_store`)", "open"),
        ("recovery (`_recover`)", "recovery"),
        ("report and magics (the rest)", "rest"),
        ("then a request's context (`build_context`, encoded)", "cell"),
    ):
        print(f"| {part} | {ms(med(key))} ({every(key)}) |")
    print()


def peer_report(sizes: list[int], runs: dict[int, list[dict[str, Any]]], peer: list[float]) -> None:
    """Our `%load_ext` (CPU, its import included) against jupyter-ai's, fastest of each."""
    theirs = min(peer)
    print(
        "| `%load_ext`, CPU with its import (fastest) | tiny-agent-nb | jupyter_ai_magics "
        "| ratio | target |"
    )
    print("|---|---|---|---|---|")
    for n in sizes:
        ours = min(r["timed"]["import"] + r["timed"]["load_ext"] for r in runs[n])
        target = "≤ 0.5" if n == 10_000 else "—"
        print(f"| {label(n)} | {ms(ours)} | {ms(theirs)} | {ours / theirs:.2f}x | {target} |")
    print()


def memory_sites(facts: int, traced: dict[str, Any]) -> None:
    print(f"### Where the {label(facts)} session's memory is held (tracemalloc, top sites)")
    print()
    print("| size | blocks | site |")
    print("|---|---|---|")
    for site, size, count in traced["sites"]:
        print(f"| {mb(size)} | {count:,} | `{site.replace('|', '/')}` |")
    print()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", help="facts per session (default 10000,100000)")
    parser.add_argument("--repeats", type=int, help="(default 3)")
    parser.add_argument("--quick", action="store_true", help="default to 1k and 5k facts, once")
    parser.add_argument("--dir", type=Path, default=None, help="where the sessions are written")
    parser.add_argument("--memory-sites", action="store_true")
    parser.add_argument("--peer", help="a Python with jupyter-ai-magics: + its %%load_ext")
    parser.add_argument("--bytecode", action="store_true", help="bytecode cached, as a kernel's")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--trace", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # An explicit --sizes or --repeats wins over --quick's.
    args.sizes = args.sizes or ("1000,5000" if args.quick else "10000,100000")
    args.repeats = args.repeats or (1 if args.quick else 3)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.trace)))
        return 0
    from _report import now, revision  # noqa: PLC0415

    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        dirs = {n: Path(tmp) / label(n).replace(" ", "-") for n in sizes}
        for n, directory in dirs.items():
            directory.mkdir()
            build(directory, n)
        pycache = Path(tmp) / "pycache" if args.bytecode else None
        if pycache is not None:  # compiled once, by a process not measured
            measure(dirs[sizes[0]], pycache=pycache)
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
        peer: list[float] = []
        load = os.getloadavg()[0]
        for _ in range(args.repeats):
            if args.peer:
                peer.append(measure_peer(args.peer, Path(tmp)))
            for n in sizes:  # alternate, so a busy neighbour hits every size alike
                runs[n].append(measure(dirs[n], pycache=pycache))
        traced = {n: measure(dirs[n], trace=1, pycache=pycache) for n in sizes}
        cached = "bytecode cached" if pycache is not None else "bytecode as the environment says"
        print(
            f"{now()}, commit {revision()}, Python {sys.version.split()[0]}, "
            f"{os.cpu_count()} cores, load {load:.2f} -> {os.getloadavg()[0]:.2f}, "
            f"{args.repeats} fresh processes per size, {cached}"
        )
        print()
        for n in sizes:
            size = (dirs[n] / PRISTINE).stat().st_size
            report(n, size, runs[n], traced[n])
            if any(r["httpx"] for r in runs[n]):
                print("- httpx was imported during start-up")
        if peer:
            peer_report(sizes, runs, peer)
        if args.memory_sites:
            biggest = max(sizes)
            memory_sites(biggest, measure(dirs[biggest], trace=25, pycache=pycache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
