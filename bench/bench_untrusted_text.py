"""Benchmark the passes every piece of untrusted text goes through, on hostile input.

    python bench/bench_untrusted_text.py [--scale 4] [--repeats 7] [--quick]

What is measured: `safe_text` (text output a Jupyter frontend would link,
tiny_agent_nb/safe_markdown.py) and `clean_text` (every tool result before it is
committed, tiny_agent_nb/tools/_limits.py), each on the inputs that once made them
quadratic: a long run of letters with no `://` after it (a base64 line: 40 KB took 7 s of
the kernel's CPU per render), and runs of spaces, cut-mark openings, blank lines and
pieces of a secret (200,000 spaces took ~45 s).

Raw baseline, measured in the same run: the same function on ordinary text of the same
length (words, spaces, lines, a URL now and then), which every pass handles in linear
time. The ratio is hostile / ordinary: a constant when the hostile input costs what its
length says (1x for most; 25x for cut-mark openings, one cut mark every 4 characters
where ordinary text has none), the same at every scale; a pass that went quadratic
again shows thousands at these sizes (the pre-linear scheme finder: 6,300x at 60 k
characters), so the target, ≤ 100, sits far from both. Time is CPU time of this process
(`time.process_time`), which other work on the machine hardly moves; the repeats are
interleaved (hostile, ordinary, hostile, ...) and the fastest of each is shown (noise
only ever adds time), with min / median / max below.

It is a report, not a test: missing a target still exits 0. tests/test_bench_untrusted_text.py
runs `--quick` and checks every ratio against the target.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from _report import Row, now, print_rows, print_spreads, revision, settle, spread

from tiny_agent_nb.safe_markdown import safe_text
from tiny_agent_nb.tools import clean_text

TARGET = 100.0
KEY = "sk-or-v1-0123456789abcdef0123456789abcdef"
ORDINARY = "the run read 12 files, see https://example.com/log and go on.\n"


def cleaned(text: str) -> str:
    return clean_text(text, [KEY])


@dataclass(frozen=True)
class Case:
    metric: str
    hostile: Callable[[int], str]  # scale -> text
    apply: Callable[[str], str]


CASES = (
    Case(
        "safe_text: a run of letters (base64)",
        lambda k: "QUFB" * 15_000 * k + " then javascript://x and data:y",
        safe_text,
    ),
    Case("clean_text: spaces", lambda k: " " * 200_000 * k, cleaned),
    Case(
        "clean_text: cut-mark openings",
        lambda k: "[..." * 50_000 * k,
        cleaned,
    ),
    Case("clean_text: blank lines", lambda k: " \n" * 100_000 * k, cleaned),
    Case(
        "clean_text: pieces of a secret",
        lambda k: (KEY[:12] + " ") * 15_000 * k,
        cleaned,
    ),
)


def ordinary(length: int) -> str:
    return (ORDINARY * (length // len(ORDINARY) + 1))[:length]


def cpu(apply: Callable[[str], str], text: str) -> float:
    settle()
    started = time.process_time()
    apply(text)
    return time.process_time() - started


def measure(case: Case, scale: int, repeats: int) -> tuple[Row, tuple[str, str, str]]:
    hostile = case.hostile(scale)
    baseline = ordinary(len(hostile))
    ours: list[float] = []
    raw: list[float] = []
    for _ in range(repeats):
        ours.append(cpu(case.apply, hostile))
        raw.append(cpu(case.apply, baseline))
    best, floor = min(ours), min(raw)
    ratio = best / floor if floor > 0 else None
    size = f"{len(hostile) // 1000:,} k chars"
    row = Row(f"{case.metric}, {size}", ms(best), ms(floor), ratio, TARGET)
    return row, (row.metric, spread(ours, ms), spread(raw, ms))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.2f} ms"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--scale", type=int, default=4, help="inputs this many times the quick size"
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="scale 1, 3 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.scale, args.repeats = 1, 3
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"# untrusted text on hostile input, {now()}, {revision()}")
    print(f"Python {platform.python_version()}, scale {args.scale}, {args.repeats} repeats")
    print()
    results = [measure(case, args.scale, args.repeats) for case in CASES]
    print_rows([row for row, _ in results])
    print()
    print_spreads([spreads for _, spreads in results])
    return 0


if __name__ == "__main__":
    sys.exit(main())
