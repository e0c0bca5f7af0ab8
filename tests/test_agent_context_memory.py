"""What building a long session's context costs the kernel in resident memory.

The projection is built once per kernel, at its first model request, from the whole
session (`ContextProjection.following`). What it keeps is the messages it sends; what
the build makes and frees on the way must not stay resident. It did: the runs were
merged two by two up to the size of the whole context, and the C allocator kept the
holes the freed halves left, so a kernel held about twice the context it sends. Measured
in a fresh process (tests/children/context_rss.py): resident memory is the allocator's
whole history, and a test worker's is not the build's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tiny_agent_nb.session import HeaderInit, SessionStore

from scenario import complete_run

CHILD = Path(__file__).parent / "children" / "context_rss.py"


def test_building_a_long_sessions_context_keeps_about_what_it_sends(tmp_path: Path) -> None:
    path = tmp_path / "long.agent.jsonl"
    env = str(tmp_path)
    init = HeaderInit(cwd=env, provider="openrouter", model="test/model", environment_identity=env)
    with SessionStore.open(path, create=init) as store:
        for i in range(3000):  # 12k entries, 16 MB of context in 5 KB prompts
            complete_run(store, f"question {i}: " + "why does the parser fail? " * 200)
    done = subprocess.run(
        [sys.executable, str(CHILD), str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    measured = json.loads(done.stdout)
    assert measured["sent"] > 15_000_000
    # The runs the context keeps are what it sends; the rest of what the build touched
    # (each entry decoded and encoded once) is freed and reused as it goes.
    assert measured["grew"] <= 1.2 * measured["sent"], measured
