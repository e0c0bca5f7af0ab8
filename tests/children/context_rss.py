"""Child: how much resident memory building a session's context adds, in a fresh process.

    python context_rss.py SESSION_FILE

Prints one JSON line: {"opened": bytes of RSS opening the session added, "grew": bytes
of RSS building its context added, "sent": bytes the context sends}. A process of its
own, so the allocator holds nothing of a test run before it.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

from tiny_agent_nb.agent import ContextProjection
from tiny_agent_nb.provider import Provider, encoded, messages
from tiny_agent_nb.session import SessionStore


def resident() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise LookupError("VmRSS")


def main(path: str) -> None:
    gc.collect()
    start = resident()
    with SessionStore.open(path) as store:
        # What the kernel's recovery does at `%load_ext`: a writer's first load makes the
        # tables only the reducer reads (register row "deferred-tables"), which belong to
        # the open, not to the context.
        store.load()
        gc.collect()
        before = resident()
        context = ContextProjection.following(store.load, None)
        # As the loop does before a run's first read (agent/_loop.py `_drive`): the
        # provider's cache is kept first, so the one build goes straight into it.
        context.keep(*messages.history_cache(Provider))
        sent = sum(map(len, encoded(context.context())))
        gc.collect()
        grew = resident() - before
        print(json.dumps({"opened": before - start, "grew": grew, "sent": sent}))


if __name__ == "__main__":
    main(sys.argv[1])
