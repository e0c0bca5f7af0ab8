"""The read_notebook tool: the notebook's cells, in order, as the user has them.

Each cell comes with its id (what the cell tools name it by), its type, whether it ran, and
its source in a fence longer than any run of backticks in it, so no cell can end its own
block and pass text for the tool's. Sources are untrusted text, redacted of the secrets.
What does not fit the output limit is left to a next call (`offset`), a cell cut to fit
says so.

Its replay policy is `never`, though it only reads, and it is never asked about: the
notebook changes under the user's hands, so a read made again at recovery would not be
the one the run made, and while the notebook loads it would wait for a frontend.
"""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field

from ..session import ReplayPolicy
from ._base import BuiltinTool, ToolArguments, ToolContext, ToolError, ToolOutput
from ._limits import clean_text, truncate
from ._notebook import NotebookCell

LIVE = "live: as the notebook shows them, edits not saved yet included"
SAVED = (
    "from the saved file, NOT the live notebook: no Jupyter frontend with the notebook "
    "answered (a terminal, VS Code, Colab or a headless run), so edits the user has not "
    "saved are missing, and the cells cannot be changed"
)
OWN = "the running agent cell (this run; not yours to change)"
LANGUAGE = {"code": "python", "markdown": "markdown", "raw": ""}


class ReadNotebookArguments(ToolArguments):
    offset: int = Field(1, ge=1, description="First cell to show (1-based).")
    limit: int | None = Field(None, ge=1, description="How many cells to show (default: all).")


class ReadNotebook(BuiltinTool[ReadNotebookArguments]):
    name = "read_notebook"
    description = (
        "Read the notebook's cells, in order: each cell's id, type (code, markdown, raw), "
        "whether it ran, and its source, as the user has them now (unsaved edits "
        "included) or, where the live notebook cannot be reached, as last saved (the "
        "first line says which). Use offset/limit to page through a long notebook."
    )
    Arguments = ReadNotebookArguments
    replay_policy: ClassVar[ReplayPolicy] = "never"

    @property
    def asks_approval(self) -> bool:
        return False  # it only reads

    def execute(self, arguments: ReadNotebookArguments, context: ToolContext) -> ToolOutput:
        if context.notebook is None:
            raise ToolError("there is no notebook here: read_notebook works in a notebook only")
        notebook = context.notebook.read()
        cells = notebook.cells
        total = len(cells)
        if total == 0:
            return ToolOutput(f"[notebook: no cells; {LIVE if notebook.live else SAVED}]")
        if arguments.offset > total:
            raise ToolError(f"offset {arguments.offset} is past the last cell ({total} cells)")
        start = arguments.offset - 1
        wanted = cells[start : None if arguments.limit is None else start + arguments.limit]
        # One cell may take all the room; among several, none more than a quarter of it.
        room = context.output_limit
        cell_room = room if len(wanted) == 1 else room // 4
        blocks: list[str] = []
        for number, cell in enumerate(wanted, start=start + 1):
            block = _block(
                cell,
                number,
                total=total,
                own_cell_id=notebook.own_cell_id,
                room=cell_room,
                context=context,
            )
            if blocks and len(block) + 1 > room:
                break
            blocks.append(block)
            room -= len(block) + 1
        end = start + len(blocks)
        shown = f"{total} cells" if len(blocks) == total else f"cells {start + 1}-{end} of {total}"
        header = f"[notebook: {shown}; {LIVE if notebook.live else SAVED}]"
        if end < start + len(wanted):
            header += f" (the rest did not fit: read on with offset={end + 1})"
        return ToolOutput("\n".join([header, *blocks]))


def _block(
    cell: NotebookCell,
    number: int,
    *,
    total: int,
    own_cell_id: str | None,
    room: int,
    context: ToolContext,
) -> str:
    facts = [f"cell {number} of {total}", f"id {cell.id}", cell.cell_type]
    if cell.cell_type == "code":
        facts.append("ran" if cell.ran else "not run")
    if cell.id == own_cell_id:
        facts.append(OWN)
    source = clean_text(cell.source, context.secrets)
    if len(source) > room:
        alone = (
            "" if room == context.output_limit else f"; read it alone with offset={number} limit=1"
        )
        facts.append(f"cut to fit: {len(source)} characters, head and tail shown{alone}")
        source = truncate(source, max(room, 0))
    longest = max((len(run) for run in re.findall("`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{' · '.join(facts)}\n{fence}{LANGUAGE[cell.cell_type]}\n{source}\n{fence}"
