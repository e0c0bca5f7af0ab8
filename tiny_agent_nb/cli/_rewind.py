"""`tiny-agent-nb rewind FILE K [--yes] [--force] [--undo]`: a rewind (docs/spec.md §17)
without Jupyter. It prints the plan; only with --yes does it change anything, and then
it appends to FILE (as its one writer: refused while a kernel has it open) and restores
the files of the session's workspace."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..agent import (
    AgentError,
    carry_out,
    interrupted_rewind,
    operation_numbered,
    plan_recovery,
    plan_rewind,
    undo_target,
)
from ..session import FileStore, SessionLockedError, SessionStore
from ..words import printable
from ._common import EXIT_OK, EXIT_USAGE, EXIT_WRITE_FAILED, _Failed, _read


def configure_rewind(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a session file (*.jsonl)")
    parser.add_argument(
        "number", metavar="K", nargs="?", type=int, help="the run, as the timeline numbers it"
    )
    parser.add_argument("--undo", action="store_true", help="undo the last rewind instead")
    parser.add_argument("--yes", action="store_true", help="carry it out (else: the plan only)")
    parser.add_argument(
        "--force", action="store_true", help="restore files changed since by someone else too"
    )


def run_rewind(args: argparse.Namespace) -> int:
    if (args.number is None) != args.undo:
        raise _Failed(EXIT_USAGE, "error: give K or --undo", {"type": "UsageError"})
    _read(args.file)  # a damaged or foreign file is said as every command says it
    try:
        store = SessionStore.open(args.file)
    except SessionLockedError as exc:
        message = f"error: {printable(str(exc))}\nUse `%agent rewind` in that kernel."
        raise _Failed(EXIT_WRITE_FAILED, message, {"type": "SessionLockedError"}) from None
    with store:
        state = store.load()
        root = Path(state.header.environmentIdentity)
        open_op = state.open_operation
        if open_op is not None and open_op.kind == "rewind":
            # A rewind a dead process left: settled as a load settles it, and said.
            recovery = plan_recovery(state, {}, str(root))
            assert recovery is not None
            store.commit(recovery.closing_transaction())
            state = store.load()
            print(
                printable("\n".join(interrupted_rewind(state, open_op.id, root)), keep_lines=True)
            )
        try:
            target = undo_target(state) if args.undo else operation_numbered(state, args.number)
            files = FileStore.for_session(state.header.id)
            plan = plan_rewind(state, target, files, root, force=args.force, undo=args.undo)
        except AgentError as exc:
            raise _Failed(EXIT_USAGE, f"error: {exc}", {"type": "RewindRefused"}) from None
        print(printable(plan.text(), keep_lines=True))
        if not args.yes:
            print("Nothing has changed: add --yes to carry it out.")
            return EXIT_OK
        done = carry_out(store, plan, files, root)
        print(printable(done.text(), keep_lines=True))
    return EXIT_OK
