"""Benchmark the notebook timeline's Python-side build at 1k / 10k / 100k facts.

    python bench/bench_timeline.py [--sizes 1000,10000,100000]

What the timeline display does on every (throttled) refresh: `store.load()` snapshot,
`build_timeline` (one pass over the facts, rows for the current page only) and
`timeline_html` (bounded: one page of runs, at most 60 attempt and 60 tool rows per run).
The raw baseline, measured in the same run, is the cheapest possible pass over what the
timeline reads: counting the operations, attempts and tool intents by status (a pass
over `state.facts` would time reading the file again and decoding it, not the timeline).
The payload (HTML bytes sent to the browser) must stay bounded as the session grows.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tiny_agent_nb.render import timeline_html
from tiny_agent_nb.session import HeaderInit, SessionStore
from tiny_agent_nb.timeline import build_timeline

from helpers.scenario import complete_run

FACTS_PER_RUN = 11  # complete_run commits 11 facts


def best(fn: object, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def measure(size: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        init = HeaderInit(cwd=tmp, provider="openrouter", model="m", environment_identity=tmp)
        with SessionStore.open(Path(tmp) / "s.jsonl", create=init) as store:
            for _ in range(size // FACTS_PER_RUN):
                complete_run(store, "x" * 200)
            state = store.load()
            facts = state.last_seq

            def raw() -> None:
                counts: dict[str, int] = {}
                for table in (state.operations, state.attempts, state.tool_intents):
                    for record in table.values():
                        counts[record.status] = counts.get(record.status, 0) + 1

            snapshot = best(store.load)
            build = best(lambda: build_timeline(state))
            timeline = build_timeline(state)
            render = best(lambda: timeline_html(timeline))
            baseline = best(raw)
            payload = len(timeline_html(timeline).encode())
    return {
        "facts": facts,
        "snapshot": snapshot,
        "build": build,
        "render": render,
        "baseline": baseline,
        "payload": payload,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    args = parser.parse_args()
    print(
        "| facts | store.load() | build_timeline | timeline_html | refresh total | raw pass | "
        "build / raw | HTML payload |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        m = measure(size)
        total = m["snapshot"] + m["build"] + m["render"]
        print(
            f"| {m['facts']:,.0f} | {m['snapshot']:.1f} ms | {m['build']:.1f} ms | "
            f"{m['render']:.2f} ms | {total:.1f} ms | {m['baseline']:.2f} ms | "
            f"{m['build'] / m['baseline']:.1f}x | {m['payload'] / 1024:.0f} KiB |"
        )


if __name__ == "__main__":
    main()
