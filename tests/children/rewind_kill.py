"""Child of tests/test_agent_rewind.py: a rewind killed with SIGKILL between a file's
`fileRestore` commit and its replace, the moment intent-before-effect is for.

    python rewind_kill.py SESSION ROOT STATE NUMBER

Opens SESSION, plans a rewind to before operation NUMBER over the files in ROOT (the
file store under STATE; `-`: the session's own), and carries it out; the second file's
replace kills the process instead.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from tiny_agent_nb.agent import _restore, carry_out, operation_numbered, plan_rewind
from tiny_agent_nb.session import FileStore, SessionStore


def main() -> None:
    session, root, state_root, number = sys.argv[1:5]
    replaced = _restore.replace
    calls = 0

    def replace_then_die(*args: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        replaced(*args)  # type: ignore[arg-type]

    _restore.replace = replace_then_die
    with SessionStore.open(session) as store:
        state = store.load()
        if state_root == "-":
            files = FileStore.for_session(state.header.id)
        else:
            files = FileStore.for_session("session", Path(state_root))
        plan = plan_rewind(state, operation_numbered(state, int(number)), files, Path(root))
        carry_out(store, plan, files, Path(root))


if __name__ == "__main__":
    main()
