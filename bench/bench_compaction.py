"""Benchmark one request built after a compaction checkpoint, at 1k and 100k entries before it.

    python bench/bench_compaction.py [--histories 1000,100000] [--repeats 9] [--quick]

The subject (docs/spec.md §3): once a checkpoint is committed, the cost of the next
request must not grow with the history it summarized beyond what a user could notice.
What is timed is what a model attempt does: the context built from the session
(`build_context`) and the provider's request body for it (`request_body` with the
built-in tools' schemas), i.e. everything up to the bytes handed to httpx. The messages
before the checkpoint are never built; the path's ids are still listed once a request.

Each session is written with the store directly (no model, no loop): N entries of
complete agent runs (user / assistant tool call / ~200 B tool result / answer, with their
attempts, usage and tool intents), then a compaction entry through the last of them,
then a fixed verbatim tail of TAIL_RUNS runs.

Raw baseline, built in the same run: a session of the least history a checkpoint can
summarize (one run) and the same checkpoint and tail, so its request body is byte for
byte the one after the checkpoint (checked: the summary is sent as the assistant's note
after a message of ours, which no entry can stand for) and the only difference left is
the history before it.

Key figures: request time at 100k entries / at 1k and each / baseline (info: listing
the path grows with N; a request that built the summarized history would show up at
100x), and the request at 100k against 1% of a 1 s model call.

Sizes are measured round-robin (repeats interleaved) so noise on the shared 2-core
machine falls on all of them alike; the table shows the fastest repeat of each (noise
only ever adds time), each repeat being the per-request mean over a batch of BATCH
requests, with min / median / max of every repeat below.
It is a report, not a test: missing a target still exits 0.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from _report import Row, now, print_rows, print_spreads, revision, settle, spread

from tiny_agent_nb.agent import build_context
from tiny_agent_nb.provider import ProviderConfig
from tiny_agent_nb.provider._wire import request_body
from tiny_agent_nb.session import (
    HeaderInit,
    NewFact,
    SessionState,
    SessionStore,
    ToolCall,
    ToolIdentity,
    ToolStarted,
    new_id,
)
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.tools import builtin_registry

SYSTEM = "You are a careful coding agent. Be brief."
SUMMARY = "The user asked for the keys one by one; each lookup returned its module's values."
RESULT = "\n".join(f'{n:3d}\tvalue = parse("résumé {n}")' for n in range(8))  # ~200 B
READ_FILE = ToolIdentity(name="read_file", version="1", source="builtin")
DIGEST = "sha256:" + "ab" * 32
ENTRIES_PER_RUN = 4  # user, assistant tool call, tool result, assistant answer
TAIL_RUNS = 10  # the verbatim tail after the checkpoint: 40 entries
BATCH = 200  # requests per timed sample (one request is a few microseconds)


def run_transactions(environment: str, prompt: str, call: str) -> list[list[NewFact]]:
    """One complete agent run, in the loop's eight transactions (a line each: the state
    decodes an entry by decoding its line, so one line per run would time that instead)."""
    operation, user = new_id(), new_id()
    first, second = new_id(), new_id()
    intent = f.tool_started(
        operation,
        first,
        call,
        tool=READ_FILE,
        arguments={"path": "keys.py"},
        replay_policy="safeRead",
        environment_identity=environment,
    )
    started = intent.body
    assert isinstance(started, ToolStarted) and intent.id is not None
    return [
        [f.user_message(prompt, id=user), f.run_started(operation, user)],
        [attempt(operation, 1, first)],
        [
            f.assistant_message(
                first,
                content=None,
                tool_calls=[ToolCall(id=call, name="read_file", arguments={"path": "keys.py"})],
                finish_reason="tool_calls",
            ),
            f.usage(attempt_id=first, input_tokens=100, output_tokens=10, cost=0.001),
        ],
        [intent],
        [
            f.tool_result(
                tool_started_id=intent.id,
                result_entry_id=started.resultEntryId,
                tool_call_id=call,
                content=RESULT,
                outcome="completed",
            )
        ],
        [attempt(operation, 2, second)],
        [
            f.assistant_message(second, content="Done: all keys resolved.", finish_reason="stop"),
            f.usage(attempt_id=second, input_tokens=120, output_tokens=8, cost=0.001),
        ],
        [f.NewFact(f.OperationFinished(operationId=operation, outcome="completed"))],
    ]


def attempt(operation: str, step: int, attempt_id: str) -> NewFact:
    return f.NewFact(
        f.StepAttempt(
            operationId=operation,
            step=step,
            attempt=1,
            provider="openrouter",
            model="bench/model",
            configurationDigest=DIGEST,
        ),
        attempt_id,
    )


def write_runs(store: SessionStore, runs: int, prompt: str) -> None:
    env = store.header.environmentIdentity
    for i in range(runs):
        for transaction in run_transactions(env, f"{prompt} {i}", f"call_{i}"):
            store.commit(transaction)


def build_session(directory: Path, history: int) -> SessionState:
    """`history` entries, a checkpoint through the last, then the tail; history 0 is the
    baseline: one run, the same checkpoint through it, then the same tail."""
    init = HeaderInit(
        cwd=str(directory), provider="openrouter", model="m", environment_identity=str(directory)
    )
    with SessionStore.open(directory / "s.jsonl", create=init) as store:
        write_runs(store, max(1, history // ENTRIES_PER_RUN), "Look up key")
        through = list(store.load().entries)[-1]
        store.commit(
            [
                f.NewFact(
                    f.CompactionEntry(
                        summary=SUMMARY, throughEntryId=through, tokensBefore=history * 100
                    )
                )
            ]
        )
        write_runs(store, TAIL_RUNS, "Now the tail, key")
        return store.load()


@dataclass
class Session:
    history: int
    state: SessionState
    request: list[float] = field(default_factory=list)  # seconds per request, per repeat


CONFIG = ProviderConfig(model="bench/model", api_key="sk-bench")
TOOLS = builtin_registry().schemas()


def one_request(state: SessionState) -> bytes:
    """What `AgentLoop` + `Provider.complete` do before handing the body to httpx."""
    return request_body(CONFIG, build_context(state, SYSTEM), TOOLS)


def time_requests(session: Session) -> None:
    settle()
    start = time.perf_counter()
    for _ in range(BATCH):
        one_request(session.state)
    session.request.append((time.perf_counter() - start) / BATCH)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def measure(sessions: Sequence[Session], repeats: int) -> None:
    for r in range(repeats):
        # Alternate the order so neither end of a round always runs first.
        order = sessions if r % 2 == 0 else list(reversed(sessions))
        for session in order:
            time_requests(session)


def med(values: Sequence[float]) -> float:
    """The fastest repeat: on a shared machine noise only ever adds time."""
    return min(values)


def report(baseline: Session, small: Session, large: Session) -> list[Row]:
    def rate(s: Session) -> str:
        return f"{us(med(s.request))} ({s.history:,} entries before)"

    rows = [
        Row(
            f"request after checkpoint, {label(s.history)} before / tail only",
            rate(s),
            us(med(baseline.request)),
            med(s.request) / med(baseline.request),
            None,
        )
        for s in (small, large)
    ]
    rows.append(
        Row(
            f"flatness: request at {label(large.history)} / at {label(small.history)}",
            us(med(large.request)),
            us(med(small.request)),
            med(large.request) / med(small.request),
            None,
        )
    )
    rows.append(
        Row(
            f"request at {label(large.history)} / 1% of a 1 s model call",
            us(med(large.request)),
            ms(0.01),
            med(large.request) / 0.01,
            1.0,
        )
    )
    return rows


def label(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--histories", default="1000,100000", help="two entry counts")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="100 and 2,000 entries, 5 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.histories, args.repeats = "100,2000", 5
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    small_n, large_n = (int(n) for n in args.histories.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        sessions = []
        for history in (0, small_n, large_n):
            directory = Path(tmp) / str(history)
            directory.mkdir()
            started = time.perf_counter()
            state = build_session(directory, history)
            built = time.perf_counter() - started
            sessions.append(Session(history, state))
            print(
                f"built {history:,} entries + checkpoint + tail in {built:.1f} s", file=sys.stderr
            )
    baseline, small, large = sessions
    expected = one_request(baseline.state)
    for session in (small, large):
        # Same bytes sent: the ratios compare the same request, differing only in history.
        assert one_request(session.state) == expected, session.history
    measure(sessions, args.repeats)

    print(f"# bench_compaction — {now()}, {revision()}")
    print()
    print(
        f"Python {platform.python_version()}, {platform.machine()}; {args.repeats} repeats "
        f"of {BATCH} requests; tail of {TAIL_RUNS * ENTRIES_PER_RUN} entries, "
        f"{len(expected):,} bytes per request."
    )
    print()
    print_rows(report(baseline, small, large))
    print()
    spreads = [
        (f"{name}, {label(s.history)} before", spread(mine, unit), spread(base, unit))
        for s in (small, large)
        for name, mine, base, unit in (("request", s.request, baseline.request, us),)
    ]
    print_spreads(spreads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
