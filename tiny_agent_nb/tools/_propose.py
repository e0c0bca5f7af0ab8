"""The propose_cell tool: code handed back to the user as a new cell, not run.

The notebook puts the code in a new cell below the running agent cell (IPython's
`set_next_input(code, replace=False)`, which JupyterLab, Notebook and VS Code honour
once the agent cell finishes), or, in a run with no cell run of its own to carry it (one
the Resume button started), shows it in the run's output to copy; the result says which.
Nothing runs: the user reads the code and runs it or not.
So `--approve ask` does not ask for it (the cell is the review), and its replay policy
is `never` (it put something on the user's screen; after a crash it is not put again).

The user reviews the code by reading it, so what they read must be what would run:
characters that are invisible or change how the text reads (bidirectional controls, as
in "Trojan Source", zero-width and other format characters, invisible fillers Python
accepts in names, variation selectors that can smuggle bytes, control characters) are
refused, with where they are, and the model can write them as escapes instead; so are
lines that run off to the right of an editor (which does not wrap code), where a
statement after a long run of spaces would go unseen.
"""

from __future__ import annotations

import re
import unicodedata
from typing import ClassVar

from pydantic import Field

from ..session import ReplayPolicy
from ._base import ToolArguments, ToolContext, ToolError, ToolOutput
from ._builtin import BuiltinTool

MAX_PROPOSED_CHARACTERS = 20_000  # a cell longer than a few screens is no review
# An editor does not wrap code: what follows a long gap, or ends a very long line, is off
# to the right where a reader does not look.
MAX_LINE = 300
_GAP = re.compile(r"\S[ \t]{40,}\S")
MAX_REPORTED = 5  # hidden characters named in a refusal
# Invisible in an editor although Python accepts them (Hangul fillers are letters, so
# they may even be a name), or able to carry hidden bytes (variation selectors).
_INVISIBLE = frozenset({0x115F, 0x1160, 0x3164, 0xFFA0, *range(0xFE00, 0xFE10)}) | frozenset(
    range(0xE0100, 0xE01F0)
)
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


class ProposeCellArguments(ToolArguments):
    code: str = Field(description="The code of the new cell.")


class ProposeCell(BuiltinTool[ProposeCellArguments]):
    name = "propose_cell"
    description = (
        "Put code in a new cell below the agent cell, for the user to review and run (in "
        "a run resumed with the Resume button, which has no cell run of its own, the code "
        "is shown in the run's output for the user to copy instead; the result says "
        "which). It does not run: when you get the result, nothing the code does has "
        "happened. One cell per agent cell."
    )
    replay_policy: ClassVar[ReplayPolicy] = "never"
    Arguments = ProposeCellArguments

    @property
    def asks_approval(self) -> bool:
        return False  # the proposed cell is itself what the user reviews before it runs

    def execute(self, arguments: ProposeCellArguments, context: ToolContext) -> ToolOutput:
        code = arguments.code.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
        if not code.strip():
            raise ToolError("the cell is empty; nothing was proposed")
        if len(code) > MAX_PROPOSED_CHARACTERS:
            raise ToolError(
                f"the cell has {len(code)} characters, more than the {MAX_PROPOSED_CHARACTERS} "
                "a user can review; nothing was proposed. Propose a shorter cell."
            )
        hidden = hidden_characters(code)
        if hidden:
            raise ToolError(
                "the cell holds characters a reader cannot see or that change how the code "
                f"reads ({', '.join(hidden)}); nothing was proposed. Write them as escapes "
                "in a string (\\u200b) or leave them out."
            )
        wide = wide_lines(code)
        if wide:
            raise ToolError(
                f"line(s) {', '.join(map(str, wide))} run off to the right (more than "
                f"{MAX_LINE} characters, or a long run of spaces inside): a reader would not "
                "see all of it; nothing was proposed. Wrap the code."
            )
        if context.propose_cell is None:
            raise ToolError("there is no notebook to put a cell in; nothing was proposed")
        where = context.propose_cell(code)
        lines = code.count("\n") + 1
        return ToolOutput(
            f"Proposed {lines} line(s) of code {where}. It has not run: the user reviews it "
            "and runs it if they choose, so nothing it does has happened yet."
        )


def hidden_characters(code: str) -> list[str]:
    """`U+202E at line 3` for each hidden character (the first few), else nothing."""
    found: list[str] = []
    for number, line in enumerate(code.split("\n"), start=1):
        for char in line:
            point = ord(char)
            if char == "\t":
                continue
            if point in _INVISIBLE or unicodedata.category(char) in _HIDDEN_CATEGORIES:
                found.append(f"U+{point:04X} at line {number}")
                if len(found) == MAX_REPORTED:
                    return [*found, "…"]
    return found


def wide_lines(code: str) -> list[int]:
    """The numbers of the lines a reader would have to scroll right to see whole."""
    return [
        number
        for number, line in enumerate(code.split("\n"), start=1)
        if len(line) > MAX_LINE or _GAP.search(line)
    ][:MAX_REPORTED]
