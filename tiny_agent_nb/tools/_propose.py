"""The propose_cell tool: code handed back to the user as a new cell, not run.

The notebook puts it in a new cell below the running agent cell (IPython's
`set_next_input(code, replace=False)`), or, in a run with no cell run of its own to carry
it (one the Resume button started), shows it to copy; the result says which. `--approve
ask` does not ask for it (the cell is the review), and it is never replayed (it put
something on the user's screen).

What the user reads must be what would run: characters a reader does not see as
themselves (`words.hidden_at`: bidi controls as in "Trojan Source", zero-width and other
default-ignorable characters Python accepts in names, blanks, marks on nothing, controls)
are refused, with where they are, so the model writes them as escapes; so are lines wider
than a cell shows without scrolling, where a statement after a long run of spaces would
go unseen.
"""

from __future__ import annotations

from pydantic import Field

from ..words import hidden_at
from ._base import BuiltinTool, ToolArguments, ToolContext, ToolError, ToolOutput

MAX_PROPOSED_CHARACTERS = 20_000  # a cell longer than a few screens is no review
# Columns of a line a notebook cell shows without scrolling right (a JupyterLab or
# Notebook 7 cell beside the file browser, at the default font size); what lies past
# them, after a long run of spaces or at the end of a long line, goes unread.
MAX_COLUMNS = 100
TAB = 4  # columns of a tab stop in the cell's editor (JupyterLab's and VS Code's default)
MAX_REPORTED = 5  # hidden characters or wide lines named in a refusal


class ProposeCellArguments(ToolArguments):
    code: str = Field(description="The code of the new cell.")


class ProposeCell(BuiltinTool[ProposeCellArguments]):
    name = "propose_cell"
    description = (
        "Put code in a new cell below the agent cell, for the user to review and run (in "
        "a run resumed with the Resume button, which has no cell run of its own, the code "
        "is shown in the run's output for the user to copy instead; the result says "
        "which). It does not run: when you get the result, nothing the code does has "
        f"happened. One cell per agent cell; lines of at most {MAX_COLUMNS} columns, no "
        "invisible characters (write them as escapes)."
    )
    Arguments = ProposeCellArguments

    @property
    def asks_approval(self) -> bool:
        return False  # the proposed cell is itself what the user reviews before it runs

    def execute(self, arguments: ProposeCellArguments, context: ToolContext) -> ToolOutput:
        code = arguments.code.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
        if not code.strip():
            raise ToolError("the cell is empty; nothing was proposed")
        refuse_unreviewable(code, "nothing was proposed")
        if context.propose_cell is None:
            raise ToolError("there is no notebook to put a cell in; nothing was proposed")
        where = context.propose_cell(code)
        lines = code.count("\n") + 1
        return ToolOutput(
            f"Proposed {lines} line(s) of code {where}. It has not run: the user reviews it "
            "and runs it if they choose, so nothing it does has happened yet."
        )


def refuse_unreviewable(code: str, nothing: str) -> None:
    """ToolError unless a reader sees all of `code` as it is (the one rule for reviewed
    code: its size, hidden characters, wide lines); `nothing` says what did not happen."""
    if len(code) > MAX_PROPOSED_CHARACTERS:
        raise ToolError(
            f"the cell has {len(code)} characters, more than the {MAX_PROPOSED_CHARACTERS} "
            f"a user can review; {nothing}. Propose a shorter cell."
        )
    hidden = hidden_characters(code)
    if hidden:
        raise ToolError(
            "the cell holds characters a reader cannot see as themselves or that change "
            f"how the code reads ({', '.join(hidden)}); {nothing}. Write them "
            "as escapes in a string (\\u200b) or leave them out."
        )
    wide = wide_lines(code)
    if wide:
        raise ToolError(
            f"line(s) {', '.join(wide)} are wider than the {MAX_COLUMNS} columns a "
            f"notebook cell shows without scrolling (a tab reaches the next multiple of "
            f"{TAB}, a wide character counts 2): a reader would not see all of it; "
            f"{nothing}. Wrap the code: break lines inside brackets, split "
            'a long string into adjacent literals ("..." "...") in parentheses, or '
            "read long data from a file."
        )


def hidden_characters(code: str) -> list[str]:
    """`U+202E at line 3` for each hidden character (the first few), else nothing."""
    found: list[str] = []
    for number, line in enumerate(code.split("\n"), start=1):
        for index in hidden_at(line):
            if line[index] != "\t":  # layout, measured by `columns`
                found.append(f"U+{ord(line[index]):04X} at line {number}")
                if len(found) == MAX_REPORTED:
                    return [*found, "…"]
    return found


def columns(line: str) -> int:
    """How many columns `line` takes in a cell: a tab to the next multiple of `TAB`, the
    rest as wcwidth measures it (East Asian wide and fullwidth 2, marks 0)."""
    # Imported here: its tables take ~60 ms to load, and only a proposal measures.
    from wcwidth import wcwidth  # noqa: PLC0415

    column = 0
    for char in line:
        column = column + TAB - column % TAB if char == "\t" else column + max(wcwidth(char), 0)
    return column


def wide_lines(code: str) -> list[str]:
    """`2 (130 columns)` for each line a reader would have to scroll right to see whole."""
    wide = [
        f"{number} ({width} columns)"
        for number, line in enumerate(code.split("\n"), start=1)
        if (width := columns(line)) > MAX_COLUMNS
    ]
    return wide if len(wide) <= MAX_REPORTED else [*wide[:MAX_REPORTED], "…"]
