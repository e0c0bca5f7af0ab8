"""How a proposed cell reaches the notebook: IPython's `set_next_input`.

The kernel attaches it to the reply of the running execution (a `set_next_input`
payload): JupyterLab and Notebook 7 insert a new code cell below the agent cell holding
the code when that cell finishes, VS Code's Jupyter extension too; a terminal IPython puts
it in the next prompt. It is text in an editor: nothing runs until the user runs it.

IPython keeps one per execution (a second `set_next_input` replaces the first), so a
second proposal in the same agent cell is refused: the first one's result said it was
proposed, and it stays so.

A run the Resume button started has no execute request of its own, so no reply to carry
a payload (`has_reply`): its code is shown in the run's output, under the cell that asked
for it, marked as not inserted, for the user to copy; the result tells the model so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from IPython.display import display

from ..redaction import redact
from ..tools import ToolError
from ._comm_pump import has_reply
from ._display import answer_bundle

SECOND_PROPOSAL = (
    "a cell was already proposed during this agent cell, and the notebook shows only one "
    "per cell run; this one was not proposed. Put all the code in that one cell, or tell "
    "the user what to run."
)
INSERTED = "as a new cell below the agent cell"
SHOWN = (
    "as code shown in the run's output for the user to copy, not as a new cell: a run "
    "resumed with the Resume button has no cell run of its own for the notebook to insert "
    "one after"
)
SHOWN_HEADING = (
    "▸ Proposed code, **not inserted as a cell** (a run resumed with the Resume button has "
    "no cell run of its own to insert one after): copy it into a cell to run it."
)


def cell_proposer(shell: Any, secrets: Callable[[], tuple[str, ...]]) -> Callable[[str], str]:
    """`propose_cell` for the tools: the code as the next input, below the running cell,
    or shown where there is no reply to carry it. Returns where it went (`INSERTED`,
    `SHOWN`). `secrets`: what the shown code is redacted of, as every output is."""

    def propose(code: str) -> str:
        if not has_reply():
            display(
                answer_bundle(f"{SHOWN_HEADING}\n\n{fenced(redact(code, secrets()))}"), raw=True
            )
            return SHOWN
        if proposed_already(shell):
            raise ToolError(SECOND_PROPOSAL)
        shell.set_next_input(code, replace=False)
        return INSERTED

    return propose


def fenced(code: str) -> str:
    """`code` as one fenced markdown block: the fence is longer than any run of backticks
    in it, so no line of the code can close it."""
    longest = max((len(run) for run in re.findall("`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}python\n{code}\n{fence}"


def proposed_already(shell: Any) -> bool:
    """Whether this execution holds a next input already (ours or the user's code's)."""
    payloads = getattr(shell, "payload_manager", None)
    if payloads is not None:
        return any(
            isinstance(p, dict) and p.get("source") == "set_next_input"
            for p in payloads.read_payload()
        )
    return bool(getattr(shell, "rl_next_input", None))  # a terminal's next prompt
