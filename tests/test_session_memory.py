"""What decoding a session's lines leaves behind in a kernel's memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tiny_agent_nb.session import HeaderInit, SessionStore
from tiny_agent_nb.session._lines import READ_AHEAD

from scenario import complete_run

_DECODE_EVERY_ENTRY = """
import gc, sys, tracemalloc
from tiny_agent_nb.session import load_session
state = load_session(sys.argv[1])  # through its snapshot: no line decoded yet
gc.collect()
tracemalloc.start()
for entry_id in state.entries:
    state.entries[entry_id]
gc.collect()
print(tracemalloc.get_traced_memory()[0])
"""


def test_decoding_every_entry_leaves_no_strings_behind(tmp_path: Path) -> None:
    """pydantic caches short strings process-wide (16,384 of them); with values cached,
    a kernel that built its context from a long session kept thousands of its ids in
    that cache for good. Only keys are cached now. A fresh process: its cache is empty."""
    path = tmp_path / "many.agent.jsonl"
    env = str(tmp_path)
    init = HeaderInit(cwd=env, provider="openrouter", model="test/model", environment_identity=env)
    with SessionStore.open(path, create=init) as store:
        for _ in range(2000):  # 8,000 entries: 14,000 distinct ids in their lines
            complete_run(store)
    done = subprocess.run(
        [sys.executable, "-c", _DECODE_EVERY_ENTRY, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    held = int(done.stdout)
    # What stays: the last verified read-ahead of the lines (`_lines.READ_AHEAD`).
    assert held < READ_AHEAD + 100_000, f"{held:,} bytes held after decoding"
