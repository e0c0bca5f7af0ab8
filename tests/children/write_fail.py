"""Child of tests/test_session_store_write_failure.py: a commit the OS refuses part-way.

    python write_fail.py PATH ROOM

Opens PATH (creating it), commits one complete run, then caps the file size with
RLIMIT_FSIZE at ROOM bytes above the current size (SIGXFSZ ignored, so the kernel
answers with a short write and then EFBIG instead of killing us) and commits a ~20 KB
transaction. With ROOM > 0 the first os.write lands ROOM bytes, the next gets EFBIG.
Then it retries a small transaction with the same ids, which must fit and succeed.
Prints one JSON object describing what it saw; the parent asserts on it.
"""

from __future__ import annotations

import json
import resource
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for scenario

from tiny_agent_nb.session import (
    HeaderInit,
    SessionError,
    SessionStore,
    SessionWriteError,
    load_session,
    new_id,
)
from tiny_agent_nb.session import facts as f

from helpers.scenario import complete_run

SMALL_ROOM = 1024  # what the small retry needs at most


def main() -> None:
    path, room = Path(sys.argv[1]), int(sys.argv[2])
    here = str(path.parent)
    init = HeaderInit(
        cwd=here, provider="openrouter", model="test/model", environment_identity=here
    )
    store = SessionStore.open(path, create=init)
    complete_run(store)
    report: dict[str, Any] = {}
    bytes_before = path.read_bytes()
    summary_before = store.load().summary()

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(bytes_before) + room, hard))

    # One transaction of two facts whose ids are reserved, so the retry can reuse them:
    # if the failed commit had leaked anything into memory, the retry would be refused.
    entry_id, operation_id = new_id(), new_id()
    prompt = "Summarize this log:\n" + "PASSED tests/test_x.py::test_case\n" * 600
    big = [f.user_message(prompt, id=entry_id), f.run_started(operation_id, entry_id)]
    try:
        store.commit(big)
        report["error"] = None
    except SessionError as exc:
        report["error"] = type(exc).__name__
        report["errno"] = exc.errno if isinstance(exc, SessionWriteError) else None
        report["message"] = str(exc)
    bytes_after = path.read_bytes()
    report["size_before"] = len(bytes_before)
    report["size_after"] = len(bytes_after)
    report["bytes_unchanged"] = bytes_after == bytes_before
    report["summary_unchanged"] = store.load().summary() == summary_before
    report["last_seq_before"] = summary_before["lastSeq"]
    report["last_seq_after_failure"] = store.load().last_seq

    # The disk has room again (for a small line): the same ids, a shorter prompt.
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(bytes_before) + max(room, SMALL_ROOM), hard))
    small = [
        f.user_message("Summarize the log.", id=entry_id),
        f.run_started(operation_id, entry_id),
    ]
    committed = store.commit(small)
    report["retry_seqs"] = [fact.seq for fact in committed]
    reloaded = load_session(path)
    report["reloaded_equals_memory"] = reloaded.summary() == store.load().summary()
    store.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
