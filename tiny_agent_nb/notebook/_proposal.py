"""How a proposed cell reaches the notebook: IPython's `set_next_input`.

The kernel attaches it to the reply of the running execution (a `set_next_input`
payload): JupyterLab and Notebook 7 insert a new code cell below the agent cell holding
the code when that cell finishes, VS Code's Jupyter extension too; a terminal IPython puts
it in the next prompt. It is text in an editor: nothing runs until the user runs it.

IPython keeps one per execution (a second `set_next_input` replaces the first), so a
second proposal in the same agent cell is refused: the first one's result said it was
proposed, and it stays so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..tools import ToolError

SECOND_PROPOSAL = (
    "a cell was already proposed during this agent cell, and the notebook shows only one "
    "per cell run; this one was not proposed. Put all the code in that one cell, or tell "
    "the user what to run."
)


def cell_proposer(shell: Any) -> Callable[[str], None]:
    """`propose_cell` for the tools: the code as the next input, below the running cell."""

    def propose(code: str) -> None:
        if proposed_already(shell):
            raise ToolError(SECOND_PROPOSAL)
        shell.set_next_input(code, replace=False)

    return propose


def proposed_already(shell: Any) -> bool:
    """Whether this execution holds a next input already (ours or the user's code's)."""
    payloads = getattr(shell, "payload_manager", None)
    if payloads is not None:
        return any(
            isinstance(p, dict) and p.get("source") == "set_next_input"
            for p in payloads.read_payload()
        )
    return bool(getattr(shell, "rl_next_input", None))  # a terminal's next prompt
