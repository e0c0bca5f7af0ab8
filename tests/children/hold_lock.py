"""Writer child of tests/test_session_store_lock.py: holds a session open until stdin closes.

    python hold_lock.py PATH [--spawn-sleep]

Opens PATH as its writer (creating it), commits one complete run, reads the file back
with load_session (as the timeline does: a POSIX lock would be dropped right there, a
flock is not), optionally starts
`sleep 30` (with close_fds=False, so any inheritable descriptor would be passed on),
prints `ready <lastSeq> <sleep pid or 0>` and blocks reading stdin. On EOF it closes the
store and exits 0; the parent usually SIGKILLs it instead.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for scenario

from tiny_agent_nb.session import HeaderInit, SessionStore, load_session

from helpers.scenario import complete_run


def main() -> None:
    path = Path(sys.argv[1])
    here = str(path.parent)
    init = HeaderInit(
        cwd=here, provider="openrouter", model="test/model", environment_identity=here
    )
    store = SessionStore.open(path, create=init)
    complete_run(store)
    assert load_session(path).last_seq == store.load().last_seq
    sleep_pid = 0
    if "--spawn-sleep" in sys.argv[2:]:
        # A tool the kernel runs (bash, a server) outlives the kernel if it is killed.
        sleeper = subprocess.Popen(
            ["sleep", "30"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
        )
        sleep_pid = sleeper.pid
    print(f"ready {store.load().last_seq} {sleep_pid}", flush=True)
    sys.stdin.read()
    store.close()


if __name__ == "__main__":
    main()
