"""Child: commit in a loop while the parent sends SIGINT at random moments.

KeyboardInterrupt may land anywhere inside `commit` (before, during or after the write,
during the merge). After each one the store's memory must equal what the file says.
Prints "ready"; at the end writes {"commits", "interrupts", "mismatches"} as JSON to
argv[4] (atomically: the parent stops signalling when it appears).

Every ROUNDS_PER_FILE rounds the writer moves on to a new file (argv[1] with a number):
the check re-reads the whole file after every round, and one file of 400 rounds of lines
up to 256 KB (~25 MB at the end) made those re-reads the test's whole cost.
"""

from __future__ import annotations

import json
import random
import signal
import sys
from pathlib import Path
from types import FrameType

from tiny_agent_nb.session import HeaderInit, SessionStore, load_session
from tiny_agent_nb.session import facts as f

ROUNDS_PER_FILE = 40


class Trigger:
    """Raise KeyboardInterrupt for SIGINT only while a commit is being attempted, so the
    consistency checks between commits run undisturbed."""

    armed = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.armed:
            raise KeyboardInterrupt


def main() -> None:
    trigger = Trigger()
    path = Path(sys.argv[1])
    rounds = int(sys.argv[2])
    rng = random.Random(int(sys.argv[3]))
    signal.signal(signal.SIGINT, trigger)
    init = HeaderInit(
        cwd=str(path.parent), provider="p", model="m", environment_identity=str(path.parent)
    )
    store = SessionStore.open(path, create=init)
    print("ready", flush=True)
    commits = interrupts = mismatches = 0
    for round_ in range(rounds):
        if round_ and round_ % ROUNDS_PER_FILE == 0:
            store.close()
            path = path.with_name(f"{path.stem}-{round_ // ROUNDS_PER_FILE}.jsonl")
            store = SessionStore.open(path, create=init)
        batch = [f.user_message("x" * rng.randint(1, 65536)) for _ in range(rng.randint(1, 4))]
        try:
            trigger.armed = True
            store.commit(batch)
            trigger.armed = False
            commits += 1
        except KeyboardInterrupt:
            trigger.armed = False
            interrupts += 1
        if store.load().summary() != load_session(path).summary():
            mismatches += 1
    store.commit([f.user_message("final")])
    final_ok = store.load().summary() == load_session(path).summary()
    report = {
        "commits": commits,
        "interrupts": interrupts,
        "mismatches": mismatches + (not final_ok),
    }
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = Path(sys.argv[4])
    out.with_suffix(".tmp").write_text(json.dumps(report))
    out.with_suffix(".tmp").replace(out)


if __name__ == "__main__":
    main()
