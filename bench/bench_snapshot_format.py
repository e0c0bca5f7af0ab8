"""The snapshot cache's format: the hand-made codec against stdlib `sqlite3`, in one run.

    python bench/bench_snapshot_format.py                 # 1,000 and 5,000 steps, 7 repeats
    python bench/bench_snapshot_format.py --steps 5000 --repeats 11
    python bench/bench_snapshot_format.py --quick         # 200 steps, 3 repeats

The sessions are bench_peers' workload (one run of N `read_file` tool steps, 1 KB results,
as the agent loop commits them), written by the store, which leaves its snapshot beside
each (docs/spec.md §14). The same reduced tables are then kept a second way: one SQLite
database (`sqlite3`, STRICT tables, one row per record, ids as TEXT, the line ends as one
BLOB, the JSON-valued fields as JSON text), written in one transaction.

Measured, CPU time, both formats interleaved (the order alternates every repetition):

- write: the tables into the cache file (the codec's `encode_tables` + one write; the
  database made and filled, committed, closed);
- warm open: the cache file read and every table rebuilt, as equal `Tables` (checked),
  in a process that has done it before (medians over the repetitions);
- cold open: the same, the first time in a fresh process (imports done before the clock
  starts), after `posix_fadvise(DONTNEED)` asked the kernel to drop the cache file's pages.

What both formats share is left out of every figure: the MAC over the cache and the
digests of the covered session bytes (§14's authenticity checks, the same for any
format), and reading the lines after the cache. The codec's tables made on first use
(`ids`, `intent_by_call`) are made inside the timing, so both sides build everything.
The SQLite side checks nothing of the values it reads (the codec checks every type and
range): that favours SQLite. Ratios are SQLite's time over the codec's in this run.
It is a report, not a test: it exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import astuple
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_peers  # noqa: E402  (the workload and its writer)

from tiny_agent_nb.session import load_session  # noqa: E402
from tiny_agent_nb.session._lines import Lines  # noqa: E402
from tiny_agent_nb.session._records import AttemptError, RunOptions, ToolIdentity  # noqa: E402
from tiny_agent_nb.session._snapshot_codec import decode_tables, parse_body  # noqa: E402
from tiny_agent_nb.session._snapshot_encode import encode_tables  # noqa: E402
from tiny_agent_nb.session._source import Source, block_digests  # noqa: E402
from tiny_agent_nb.session._tables import (  # noqa: E402
    Attempt,
    Kernel,
    LearnedWindow,
    Operation,
    Tables,
    ToolIntent,
    UsageTotals,
)

_SCHEMA = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT) STRICT;
CREATE TABLE ends (data BLOB) STRICT;
CREATE TABLE ids (id TEXT, role TEXT) STRICT;
CREATE TABLE entries (id TEXT, line INTEGER, position INTEGER, type TEXT) STRICT;
CREATE TABLE operations (id TEXT, kind TEXT, status TEXT, input TEXT, resumes TEXT,
  attempts INTEGER, intents INTEGER, unanswered INTEGER, answered INTEGER, aborted TEXT,
  detail TEXT, started INTEGER, options TEXT, cell TEXT, replays TEXT) STRICT;
CREATE TABLE attempts (id TEXT, operation TEXT, step INTEGER, attempt INTEGER,
  provider TEXT, model TEXT, digest TEXT, status TEXT, entry TEXT, calls TEXT, error TEXT,
  retryable INTEGER, started INTEGER, ended INTEGER) STRICT;
CREATE TABLE intents (id TEXT, operation TEXT, attempt TEXT, call TEXT, tool TEXT,
  arguments TEXT, policy TEXT, environment TEXT, key TEXT, result TEXT, status TEXT) STRICT;
CREATE TABLE by_call (attempt TEXT, call TEXT, intent TEXT) STRICT;
CREATE TABLE usage (target TEXT, attempt TEXT, started TEXT, input INTEGER, output INTEGER,
  reasoning INTEGER, cached INTEGER, cost REAL) STRICT;
CREATE TABLE consumed (input TEXT, consumer TEXT) STRICT;
CREATE TABLE open_calls (entry TEXT, operation TEXT, answered INTEGER) STRICT;
CREATE TABLE windows (url TEXT, model TEXT, tokens INTEGER, source TEXT, fact TEXT) STRICT;
CREATE TABLE kernels (id TEXT, opened INTEGER, pid INTEGER, host TEXT, started INTEGER,
  kernel TEXT, notebook TEXT, entries INTEGER, intents INTEGER, operations INTEGER,
  notice TEXT) STRICT;
"""


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def sqlite_write(path: Path, t: Tables) -> None:
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("BEGIN")
        for statement in filter(str.strip, _SCHEMA.split(";")):
            db.execute(statement)
        meta = {
            "lastSeq": t.last_seq,
            "open": t.open_operation_id,
            "lastCut": t.last_cut,
            "systemPrompt": t.system_prompt,
            "totals": list(astuple(t.totals)),
        }
        db.executemany("INSERT INTO meta VALUES (?, ?)", [(k, _dump(v)) for k, v in meta.items()])
        db.execute("INSERT INTO ends VALUES (?)", (t.lines._ends.tobytes(),))
        db.executemany("INSERT INTO ids VALUES (?, ?)", t.ids.items())
        db.executemany(
            "INSERT INTO entries VALUES (?, ?, ?, ?)", ((k, *v) for k, v in t.entries.items())
        )
        db.executemany(
            "INSERT INTO operations VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                (*op[:12], None if op.options is None else op.options.model_dump_json(), *op[13:])
                for op in t.operations.values()
            ),
        )
        db.executemany(
            "INSERT INTO attempts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                (
                    *a[:9],
                    _dump(a.tool_calls),
                    None if a.error is None else a.error.model_dump_json(),
                    *a[11:],
                )
                for a in t.attempts.values()
            ),
        )
        db.executemany(
            "INSERT INTO intents VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                (*i[:4], i.tool.model_dump_json(), _dump(i.arguments), *i[6:])
                for i in t.intents.values()
            ),
        )
        db.executemany(
            "INSERT INTO by_call VALUES (?, ?, ?)", ((*k, v) for k, v in t.intent_by_call.items())
        )
        db.executemany(
            "INSERT INTO usage VALUES (?,?,?,?,?,?,?,?)", ((k, *v) for k, v in t.usage.items())
        )
        db.executemany("INSERT INTO consumed VALUES (?, ?)", t.consumed_inputs.items())
        db.executemany(
            "INSERT INTO open_calls VALUES (?, ?, ?)",
            ((k, *v) for k, v in t.open_call_entries.items()),
        )
        db.executemany(
            "INSERT INTO windows VALUES (?,?,?,?,?)", ((*k, *v) for k, v in t.windows.items())
        )
        db.executemany("INSERT INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?)", t.kernels.values())
        db.execute("COMMIT")
    finally:
        db.close()


def sqlite_read(path: Path, source: Source, blocks: bytes) -> Tables:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        meta = {k: json.loads(v) for k, v in db.execute("SELECT name, value FROM meta")}
        ends = array("q")
        ends.frombytes(db.execute("SELECT data FROM ends").fetchone()[0])
        tools: dict[str, ToolIdentity] = {}

        def tool(text: str) -> ToolIdentity:
            found = tools.get(text)
            if found is None:
                found = tools[text] = ToolIdentity.model_validate_json(text)
            return found

        def attempt(row: tuple[Any, ...]) -> Attempt:
            calls = tuple(tuple(c) for c in json.loads(row[9]))
            error = None if row[10] is None else AttemptError.model_validate_json(row[10])
            retryable = None if row[11] is None else bool(row[11])
            return Attempt(*row[:9], calls, error, retryable, *row[12:])  # type: ignore[arg-type]

        def operation(row: tuple[Any, ...]) -> Operation:
            options = None if row[12] is None else RunOptions.model_validate_json(row[12])
            return Operation._make((*row[:12], options, *row[13:]))

        def intent(row: tuple[Any, ...]) -> ToolIntent:
            return ToolIntent(*row[:4], tool(row[4]), json.loads(row[5]), *row[6:])

        cut, prompt = meta["lastCut"], meta["systemPrompt"]
        return Tables(
            ids=dict(db.execute("SELECT id, role FROM ids")),
            entries={r[0]: r[1:] for r in db.execute("SELECT * FROM entries")},
            operations={r[0]: operation(r) for r in db.execute("SELECT * FROM operations")},
            attempts={r[0]: attempt(r) for r in db.execute("SELECT * FROM attempts")},
            intents={r[0]: intent(r) for r in db.execute("SELECT * FROM intents")},
            intent_by_call={(r[0], r[1]): r[2] for r in db.execute("SELECT * FROM by_call")},
            usage={r[0]: r[1:] for r in db.execute("SELECT * FROM usage")},
            consumed_inputs=dict(db.execute("SELECT * FROM consumed")),
            open_call_entries={r[0]: r[1:] for r in db.execute("SELECT * FROM open_calls")},
            windows={r[:2]: LearnedWindow(*r[2:]) for r in db.execute("SELECT * FROM windows")},
            kernels={r[0]: Kernel._make(r) for r in db.execute("SELECT * FROM kernels")},
            lines=Lines(source, ends=ends, blocks=blocks),
            totals=UsageTotals(*meta["totals"]),
            last_seq=meta["lastSeq"],
            open_operation_id=meta["open"],
            last_cut=None if cut is None else tuple(cut),
            system_prompt=None if prompt is None else tuple(prompt),
        )
    finally:
        db.close()


def codec_write(path: Path, t: Tables) -> None:
    encoded = encode_tables(t)
    assert encoded is not None
    with path.open("wb") as file:
        file.write(encoded[0])
        file.write(encoded[1])


def codec_read(path: Path, source: Source, lines_at: tuple[int, int, bytes], split: int) -> Tables:
    raw = path.read_bytes()
    with memoryview(raw) as view:
        body = parse_body(str(view[:split], "utf-8"))
        tables = decode_tables(body, view[split:], source, lines_at)
    tables.ids, tables.intent_by_call  # noqa: B018  (made on first use: made here)
    return tables


class Fixture:
    """A session, its reduced tables (through the store's snapshot), and both caches."""

    def __init__(self, session: Path) -> None:
        self.session = session
        state = load_session(session)
        assert state.snapshot_lines == state.transaction_count, "the writer's snapshot"
        self.tables = state._tables
        self.tables.ids, self.tables.intent_by_call  # noqa: B018
        data = session.read_bytes()
        self.start = data.index(b"\n") + 1
        self.end = len(data)
        self.blocks = block_digests(data)
        self.codec = session.with_suffix(".codec")
        self.sqlite = session.with_suffix(".sqlite")
        self.split = 0

    def source(self) -> Source:
        return Source(str(self.session), fd=os.open(self.session, os.O_RDONLY))


def same(a: Tables, b: Tables) -> bool:
    names = ("ids", "entries", "operations", "attempts", "intents", "intent_by_call", "usage")
    names += ("consumed_inputs", "open_call_entries", "windows", "kernels", "totals")
    names += ("last_seq", "open_operation_id", "last_cut", "system_prompt")
    return all(getattr(a, n) == getattr(b, n) for n in names) and list(a.lines._ends) == list(
        b.lines._ends
    )


def cpu(call: Callable[[], object]) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


def write_both(f: Fixture) -> tuple[float, float]:
    codec = cpu(lambda: codec_write(f.codec, f.tables))
    encoded = encode_tables(f.tables)
    assert encoded is not None
    f.split = len(encoded[0])
    sqlite = cpu(lambda: sqlite_write(f.sqlite, f.tables))
    return codec, sqlite


def read(f: Fixture, kind: str) -> Tables:
    source = f.source()
    if kind == "codec":
        return codec_read(f.codec, source, (f.start, f.end, f.blocks), f.split)
    return sqlite_read(f.sqlite, source, f.blocks)


def drop_pages(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def child(args: argparse.Namespace) -> int:
    """One cold open in this fresh process: prints its CPU seconds."""
    f = Fixture(args.session)
    f.split = args.split
    path = f.codec if args.child == "codec" else f.sqlite
    drop_pages(path)
    print(cpu(lambda: read(f, args.child)))
    return 0


def cold(f: Fixture, kind: str) -> float:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--session",
            str(f.session),
            "--split",
            str(f.split),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split()[-1])


def measure(f: Fixture, repeats: int) -> dict[str, tuple[float, float, float]]:
    """metric -> (codec median, sqlite median, median of the ratios sqlite / codec)."""
    pairs: dict[str, list[tuple[float, float]]] = {"write": [], "warm open": [], "cold open": []}
    assert same(read(f, "codec"), f.tables) and same(read(f, "sqlite"), f.tables)
    for k in range(repeats):
        order = ["codec", "sqlite"] if k % 2 == 0 else ["sqlite", "codec"]
        w = write_both(f)
        pairs["write"].append(w)
        warm = {kind: cpu(lambda kind=kind: read(f, kind)) for kind in order}
        pairs["warm open"].append((warm["codec"], warm["sqlite"]))
        chill = {kind: cold(f, kind) for kind in order}
        pairs["cold open"].append((chill["codec"], chill["sqlite"]))
    return {
        name: (
            statistics.median(c for c, _ in got),
            statistics.median(s for _, s in got),
            statistics.median(s / c for c, s in got),
        )
        for name, got in pairs.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", default="1000,5000")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", choices=["codec", "sqlite"], help=argparse.SUPPRESS)
    parser.add_argument("--session", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--split", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    steps = [200] if args.quick else [int(s) for s in args.steps.split(",")]
    repeats = 3 if args.quick else args.repeats
    print(f"# The snapshot cache's format: codec against sqlite3 {sqlite3.sqlite_version}\n")
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}\n")
    print("| metric | codec | sqlite3 | sqlite3 / codec |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-") as name:
        for n in steps:
            session = Path(name) / f"s{n}.agent.jsonl"
            bench_peers.tiny_write(session, bench_peers.Workload(), n, "process")
            f = Fixture(session)
            write_both(f)
            codec_mb, sqlite_mb = f.codec.stat().st_size / 1e6, f.sqlite.stat().st_size / 1e6
            print(f"| {n:,} steps: cache size | {codec_mb:.2f} MB | {sqlite_mb:.2f} MB | |")
            for metric, (c, s, r) in measure(f, repeats).items():
                cells = f"{c * 1e3:.1f} ms | {s * 1e3:.1f} ms | {r:.2f}x"
                print(f"| {n:,} steps: {metric} (CPU) | {cells} |")
    print(f"\nload average now {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
