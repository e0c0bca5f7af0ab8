"""Child of the rewind tests: a rewind killed with SIGKILL at a chosen step.

    python rewind_kill.py SESSION ROOT STATE NUMBER [STEP]

Opens SESSION, plans a rewind to before operation NUMBER over the files in ROOT (the
file store under STATE; `-`: the session's own), and carries it out. Without STEP, the
second file's replace kills the process instead (between its `fileRestore` commit and
its replace, the moment intent-before-effect is for). With STEP, the process kills
itself at step STEP of the rewind, counting every point before and after each commit,
before each replace's rename (its temporary file written) and after each replace (0:
before the rewind's `runStarted` is durable); a STEP past
the last point lets the rewind finish and exits 0.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from tiny_agent_nb.agent import _restore, carry_out, operation_numbered, plan_rewind
from tiny_agent_nb.session import FileStore, SessionStore


def main() -> None:
    session, root, state_root, number = sys.argv[1:5]
    kill_at = int(sys.argv[5]) if len(sys.argv) > 5 else None
    rewind_killed(session, root, state_root, int(number), kill_at)


def rewind_killed(
    session: str, root: str, state_root: str, number: int, kill_at: int | None
) -> None:
    """The rewind to before operation `number`, killed at step `kill_at` (None: at the
    second file's replace): this script's work, also a forkserver's child's target."""
    steps = 0

    def step() -> None:
        nonlocal steps
        if steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        steps += 1

    def around(call: Callable[..., None], before: bool, after: bool) -> Callable[..., None]:
        def stepped(*args: object, **kwargs: object) -> None:
            if before:
                step()
            call(*args, **kwargs)
            if after:
                step()

        return stepped

    replaced = _restore.replace
    calls = 0

    def replace_then_die(*args: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        replaced(*args)  # type: ignore[arg-type]

    _restore.replace = replace_then_die if kill_at is None else around(replaced, False, True)  # type: ignore[assignment]
    if kill_at is not None:
        os.rename = around(os.rename, True, False)
    with SessionStore.open(session) as store:
        if kill_at is not None:
            store.commit = around(store.commit, True, True)  # type: ignore[method-assign]
        state = store.load()
        if state_root == "-":
            files = FileStore.for_session(state.header.id)
        else:
            files = FileStore.for_session("session", Path(state_root))
        plan = plan_rewind(state, operation_numbered(state, number), files, Path(root))
        carry_out(store, plan, files, Path(root))


if __name__ == "__main__":
    main()
