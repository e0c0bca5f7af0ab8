"""`%agent rewind K` and `%agent rewind --undo` (docs/spec.md §17): the plan first, as
text; nothing changes until it is confirmed, by `--yes` or a Confirm button (the keyed
buttons an approval asks with) whose click carries the rewind out on the main shell,
below this cell, once the kernel is free. A click on a plan the session outgrew (a run
committed since) changes nothing and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError

from ..agent import (
    AgentError,
    carry_out,
    operation_numbered,
    plan_rewind,
    undo_target,
)
from ..render import cell_text
from ..session import FileStore, SessionStore
from ..tools import Notebook
from ._comm_pump import later_in_this_cell
from ._opening import NotebookError
from ._timeline_view import ipython_publish

UNCONFIRMED = "Nothing has changed yet."


def rewind_here(
    shell: Any,
    store: SessionStore,
    words: list[str],
    *,
    yes: bool,
    force: bool,
    undo: bool,
    rich: bool,
    before: Callable[[], None],
    notebook: Notebook | None,
    file_store: Callable[[str], FileStore],
) -> None:
    """`%agent rewind WORDS` (and a timeline's Rewind button): the plan, then a Confirm
    button where one can be clicked (`rich`), else the command that carries it out.
    `before` runs just before the rewind is carried out; `notebook`: where its cells are
    restored (on the main shell, as `apply` asks); `file_store`: the session's file
    history under the configured caps (what it keeps of a file it overwrites)."""
    if undo == bool(words):
        raise UsageError("%agent rewind takes a run's number K, or --undo")
    state = store.load()
    try:
        if undo:
            target = undo_target(state)
        else:
            if len(words) != 1 or not words[0].isdigit():
                raise UsageError(f"%agent rewind K: K is a run's number, not {words!r}")
            target = operation_numbered(state, int(words[0]))
        files = file_store(state.header.id)
        root = Path(state.header.environmentIdentity)
        plan = plan_rewind(state, target, files, root, force=force, undo=undo, notebook=notebook)
    except AgentError as exc:
        raise NotebookError(f"tiny-agent-nb: cannot rewind: {exc}") from None
    print(cell_text(plan.text(), keep_lines=True))
    seq = state.last_seq

    def run() -> None:
        before()
        # A plan the session outgrew (a run committed since it was shown) is not carried out.
        if store.load().last_seq != seq:
            print("The session changed since this plan was shown: nothing was done. Ask again.")
            return
        try:
            done = carry_out(store, plan, files, root, notebook)
        except AgentError as exc:
            print(f"tiny-agent-nb: {exc}")
            return
        print(cell_text(done.text(), keep_lines=True))

    flags = " --force" if force else ""
    command = f"%agent rewind {'--undo' if undo else plan.number} --yes{flags}"
    if yes:
        run()
    elif not rich or not confirm_button(shell, run, command):
        print(f"{UNCONFIRMED} `{command}` carries it out.")


def confirm_button(shell: Any, run: Callable[[], None], command: str) -> bool:
    """Show a Confirm and a Cancel button below this cell, as a control: the notebook
    keeps what was asked and, once answered, the answer. Confirm calls `run()` on the main
    shell once it is free. False where no click can reach the kernel."""
    from ._controls import Answer, Control, Record  # noqa: PLC0415
    from ._keyed_buttons import Button, KeyedButtons  # noqa: PLC0415

    schedule = later_in_this_cell(shell)
    if schedule is None:
        return False
    answer = Answer()

    def answered() -> None:
        confirmed = answer.choice == "confirm"
        words = "✓ rewind confirmed by you" if confirmed else "✗ rewind cancelled by you"
        control.settle(Record.of(words))
        if confirmed:
            run()
        else:
            print(f"Cancelled. {UNCONFIRMED}")

    def press(choice: str) -> None:
        if answer.give(choice):  # on the main shell either way: its output goes below this cell
            schedule(answered)

    buttons = KeyedButtons(
        "",
        [
            Button("confirm", "Confirm the rewind", ("y",), "warning"),
            Button("cancel", "Cancel", ("n", "Escape")),
        ],
        press,
    )
    waiting = Record.of(
        "○ asked to confirm the rewind, not answered here: nothing was changed "
        "(`{command}` carries it out)",
        command=command,
    )
    control = Control(buttons, waiting, ipython_publish)
    return True
