"""What building a long session's context costs the kernel in resident memory.

The projection is built once per kernel, at its first model request, from the whole
session (`ContextProjection.following`). What it keeps is the messages it sends; what
the build makes and frees on the way must not stay resident. It did, twice over: first
the runs were merged two by two up to the size of the whole context; then, sealed at
1 MiB, each run was still a block of the C allocator's heap made among the build's
temporaries (every entry decoded and encoded), whose holes the heap kept. Measured in a
fresh process (tests/children/context_rss.py): resident memory is the allocator's whole
history, and a test worker's is not the build's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).parent / "children" / "context_rss.py"


def test_building_a_10k_fact_sessions_context_keeps_about_what_it_sends(
    startup_session: Path,
) -> None:
    """bench_startup's 10k-fact session (5.8 MB: cells of ten `read_file` steps with
    1 KB results), whose context (2.7 MB) is the one that took the kernel over 1.5x the
    file: the build added 1.9x what it sends, and adds ~1.15x now (the messages in
    memory maps, the build's temporaries alone in the heap)."""
    path = startup_session

    # The first process may compile modules into the run's empty bytecode prefix
    # (tests/conftest.py), which frees memory the build then reuses: not measured. The
    # next three have their bytecode cached, as a kernel has. Their least is taken: what
    # varies from one process to the next only adds (a pymalloc arena that a few objects
    # keep alive: 1.08-1.18x in most processes, 1.48-1.52x in about one in seven), while
    # what the build keeps is there in every one.
    def measure() -> dict[str, int]:
        done = subprocess.run(
            [sys.executable, str(CHILD), str(path)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        measured: dict[str, int] = json.loads(done.stdout)
        return measured

    measure()
    measured = min((measure() for _ in "abc"), key=lambda m: m["grew"] / m["sent"])
    assert measured["sent"] > 0.4 * path.stat().st_size
    # The context keeps what it sends; the rest of what the build touched (each entry
    # decoded and encoded once, the state it reads) is freed and reused as it goes.
    # Keeping the runs as heap blocks made it 1.9x in every process.
    assert measured["grew"] <= 1.5 * measured["sent"], measured
