"""A rewind killed with SIGKILL at every step (docs/spec.md §17, "Crash-safe"): before its
`runStarted` is durable, after it, before and after each `fileRestore` commit, with each
replace's temporary file written but not renamed, after each replace, before and after its
`operationFinished`. At each, every file is wholly its old or its new content, the next
load reports which files are restored and which not (and removes a temporary file a
replace left), running the rewind again finishes it, and `--undo` after that brings back
what it found.

Each child is forked by the crash loops' forkserver (tests/conftest.py), which has
already imported the package: it opens the session itself and dies by a real SIGKILL
mid-rewind, without a fresh interpreter's second of imports per kill."""

from __future__ import annotations

import signal
from multiprocessing.context import ForkServerContext
from pathlib import Path

from test_agent_rewind import rewind, run_writing

from tiny_agent_nb.agent import AgentLoop, LoopConfig, interrupted_rewind
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import FileStore, SessionStore
from tiny_agent_nb.tools import ToolContext, builtin_registry

from children.rewind_kill import rewind_killed

NAMES = ("a.txt", "b.txt", "sub/c.bin")
OLD = {"a.txt": b"a1\n", "b.txt": b"b1\n", "sub/c.bin": b"\x00c1\xff"}
NEW = {"a.txt": b"a2\n", "b.txt": b"b2\n", "sub/c.bin": b"\x00c2\xff"}


def recover(session: Path, root: Path) -> tuple[SessionStore, list[str] | None]:
    """The session opened as `%load_ext` opens it: an open rewind settled and reported."""
    store = SessionStore.open(session)
    config = ProviderConfig(model="m", base_url="http://127.0.0.1:9", api_key="k")
    loop = AgentLoop(
        store,
        Provider(config),
        builtin_registry().subset(["read_file"]),
        ToolContext(workspace=root, namespace={}),
        LoopConfig(config),
    )
    recovery = loop.recover()
    loop.close()
    if recovery is None:
        return store, None
    state = store.load()
    assert state.operations[recovery.operation_id].status == "interrupted"
    return store, interrupted_rewind(state, recovery.operation_id, root)


def kill_at(step: int, base: Path, header_init: object, forkserver: ForkServerContext) -> bool:
    """Rewind a run that changed three files, killed at `step`; True if it was killed."""
    root, session = base / "work", base / "notebook.agent.jsonl"
    root.mkdir(parents=True)
    files = FileStore.for_session("session", base / "state")
    with SessionStore.open(session, create=header_init) as store:  # type: ignore[arg-type]
        run_writing(store, files, root, OLD)
        run_writing(store, files, root, NEW)
    child = forkserver.Process(
        target=rewind_killed, args=(str(session), str(root), str(base / "state"), 2, step)
    )
    child.start()
    child.join()
    if child.exitcode == 0:
        return False
    assert child.exitcode == -signal.SIGKILL, f"the child exited {child.exitcode}"
    disk = {name: (root / name).read_bytes() for name in NAMES}
    assert all(disk[name] in (OLD[name], NEW[name]) for name in NAMES), disk  # wholly one
    store, report = recover(session, root)
    assert not [p for p in root.rglob("*") if ".rewind-" in p.name]  # no temporary left
    with store:
        if report is None:  # killed before its start was durable, or after its end
            assert set(disk.values()) <= set(OLD.values()) | set(NEW.values())
            assert all(disk[n] == NEW[n] for n in NAMES) or all(disk[n] == OLD[n] for n in NAMES)
        else:
            said = {
                line.split(": ", 1)[1]: line.split(": ", 1)[0].strip()
                for line in report[1:-1]
                if ": " in line
            }
            for name in NAMES:
                expected = "restored" if disk[name] == OLD[name] else "not restored"
                assert said.get(name, "not restored") == expected, (step, report)
                assert name in said or disk[name] == NEW[name]  # unrecorded: untouched
            assert report[-1] == "`%agent rewind 2` finishes it (what is restored stays)."
        rewind(store, files, root, 2)
        assert {name: (root / name).read_bytes() for name in NAMES} == OLD
        rewind(store, files, root, None)  # --undo: the files as the rewind found them
        assert {name: (root / name).read_bytes() for name in NAMES} == NEW
    return True


def test_a_rewind_killed_at_every_step_is_reported_whole_and_finished(
    tmp_path: Path, header_init: object, forkserver: ForkServerContext
) -> None:
    step = 0
    while kill_at(step, tmp_path / str(step), header_init, forkserver):
        step += 1
    # runStarted (2), three files x (record 2 + rename 1 + replace 1), operationFinished (2)
    assert step == 16
