"""The cell tools: edit_cell, insert_cell, delete_cell change the user's notebook by cell id,
each only on the user's Accept of its diff.

A call reads the notebook before its intent (`prepare`), so its toolStarted records the
cell id with the old and the new source; the diff shown is made from that record, and
Accept applies exactly that change, only if the cell still holds what the diff was made
from (`Notebook.apply`). Nothing else answers the question (`ToolContext.review`: the
run's own approval question, asked whatever `--approve` says; a reply carries only the
choice), and an edited cell is never run. The diff names the cell by its place as read
("cell 3 of 10"): ids are UUIDs the user never sees. The running agent cell and any agent
cell (`%%agent`, behind other cell magics too) are not the model's to change. New source
follows the one rule for reviewed code (`refuse_unreviewable`). Never replayed: they
change the user's notebook.

Where no live notebook can be changed (no notebook, no one to ask, or `apply` answers
"unreachable": VS Code, Colab, nbclient, a terminal), new source is proposed as a cell
below instead (`propose_cell`), and the result says so.
"""

from __future__ import annotations

import difflib
import itertools
import uuid
from typing import Any, ClassVar, Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from ..redaction import REDACTED, redact, redact_json
from ..words import printable
from ._base import BuiltinTool, ToolArguments, ToolContext, ToolError, ToolOutput
from ._notebook import CellChange, CellType, ChangeAction, NotebookCells
from ._propose import MAX_PROPOSED_CHARACTERS, refuse_unreviewable

AGENT_MAGIC = "%%agent"
# Characters of a diff a user is asked to review: a deleted cell is all of its old source.
MAX_DIFF_CHARACTERS = 2 * MAX_PROPOSED_CHARACTERS
NOTHING = "nothing was changed"
CELL_CHANGE_APPLIED = (
    "The user accepted the change."  # a result that begins so: the change was applied
)
SOURCE = "The cell's whole new source (not a patch); it is not run."


class PreparedArguments(ToolArguments):
    # Filled in from the notebook before the call is recorded (what the diff is made from):
    # the cell's 1-based place among the notebook's cells as read, and their number.
    cell_number: SkipJsonSchema[int | None] = None
    cell_count: SkipJsonSchema[int | None] = None


class EditCellArguments(PreparedArguments):
    cell_id: str = Field(description="The id of the cell to change, as read_notebook gives it.")
    source: str = Field(description=SOURCE)
    old_source: SkipJsonSchema[str | None] = None


class InsertCellArguments(PreparedArguments):
    after_cell_id: str = Field(description="The id of the cell the new one goes after.")
    source: str = Field(description="The new cell's source; it is not run.")
    cell_type: Literal["code", "markdown", "raw"] = Field(
        default="code", description="The new cell's type."
    )
    # The id the new cell is given, chosen before the intent: a rewind finds the cell by it.
    new_cell_id: SkipJsonSchema[str | None] = None


class DeleteCellArguments(PreparedArguments):
    cell_id: str = Field(description="The id of the cell to delete.")
    old_source: SkipJsonSchema[str | None] = None
    # Where a rewind puts the cell back: the cell it followed (None: it was the first).
    previous_cell_id: SkipJsonSchema[str | None] = None
    old_cell_type: SkipJsonSchema[CellType | None] = None


CellArguments = EditCellArguments | InsertCellArguments | DeleteCellArguments
PREPARED = (
    "old_source",
    "cell_number",
    "cell_count",
    "new_cell_id",
    "previous_cell_id",
    "old_cell_type",
)

SHOWN = (
    "It is shown to the user as a diff to Accept or Reject; nothing changes until Accept. "
    "The running agent cell and other %%agent cells cannot be changed."
)


class CellTool(BuiltinTool[Any]):
    """What the three tools share: the read before the intent, the question, the apply."""

    action: ClassVar[ChangeAction]

    @property
    def asks_approval(self) -> bool:
        return False  # not by `--approve`: the diff is always asked about (`review`)

    def effective_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Without what `prepare` fills in: only the notebook says what the cell holds and
        where it is, not the model."""
        effective = super().effective_arguments(arguments)
        for name in PREPARED:
            effective.pop(name, None)
        return effective

    def prepare(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        new = normalized(str(arguments.get("source", "")))
        secrets = context.secrets
        if self.action != "delete":
            if is_agent_cell(new):
                raise ToolError(f"the new source is an {AGENT_MAGIC} cell, the user's; {NOTHING}")
            refuse_unreviewable(new, NOTHING)
            # The user reviews the redacted record: a secret in it would read [redacted].
            if redact(new, secrets) != new:
                raise ToolError(
                    f"the new source holds a secret, which the user cannot read; {NOTHING}"
                )
            arguments = {**arguments, "source": new}
        if context.notebook is None:
            return arguments  # nothing to read: the change can only be proposed
        cells = context.notebook.read()
        cell_id = str(arguments.get("cell_id", arguments.get("after_cell_id")))
        number, old = _source_of(cells, cell_id, may_be_agent=self.action == "insert")
        if self.action == "edit" and old == new:
            raise ToolError(f"cell {cell_id} already holds this source; {NOTHING}")
        arguments = {**arguments, "cell_number": number, "cell_count": len(cells.cells)}
        if self.action == "insert":
            arguments = {**arguments, "new_cell_id": str(uuid.uuid4())}
        else:
            arguments = {**arguments, "old_source": old}
        if self.action == "delete":
            previous = cells.cells[number - 2].id if number > 1 else None
            kind = cells.cells[number - 1].cell_type
            arguments = {**arguments, "previous_cell_id": previous, "old_cell_type": kind}
        diff = cell_diff(self.change(self.parse_arguments(arguments)))
        shown = cell_diff(self.change(self.parse_arguments(redact_json(arguments, secrets))))
        if redact(diff, secrets) != shown:
            raise ToolError(
                f"cell {cell_id} holds a secret, which you read as {REDACTED}: the diff the "
                f"user reviews could not show what the change does to it; {NOTHING}. Leave "
                "its lines out of the new source, or ask the user to make the change."
            )
        # Measured as shown: a hidden character in the user's cell is shown as its escape.
        length = len(printable(diff, keep_lines=True))
        if length > MAX_DIFF_CHARACTERS:
            raise ToolError(
                f"the diff is {length} characters, more than the {MAX_DIFF_CHARACTERS} a "
                f"user can review; {NOTHING}. Change less at once."
            )
        return arguments

    def change(self, arguments: ToolArguments) -> CellChange:
        assert isinstance(arguments, CellArguments)
        position = None  # a call recorded before the place was
        if arguments.cell_number is not None and arguments.cell_count is not None:
            position = f"{arguments.cell_number} of {arguments.cell_count}"
        if isinstance(arguments, InsertCellArguments):
            source, kind, made = arguments.source, arguments.cell_type, arguments.new_cell_id
            return CellChange("insert", arguments.after_cell_id, "", source, kind, position, made)
        new = arguments.source if isinstance(arguments, EditCellArguments) else ""
        old = arguments.old_source or ""
        return CellChange(self.action, arguments.cell_id, old, new, position=position)

    def execute(self, arguments: CellArguments, context: ToolContext) -> ToolOutput:
        change = self.change(arguments)
        if context.notebook is None:
            return self._fallback(change, context, "no notebook could be read from this kernel")
        if not isinstance(arguments, InsertCellArguments) and arguments.old_source is None:
            raise ToolError(f"the call was not prepared from the notebook; {NOTHING}")
        if context.review is None:
            return self._fallback(change, context, "no one can be asked to accept a diff here")
        try:
            accepted = context.review()
        except ToolError as exc:  # no one could be asked after all (a cell without stdin)
            return self._fallback(change, context, str(exc))
        if not accepted:
            return ToolOutput(
                f"The user rejected this change; cell {change.cell_id} is unchanged.",
                is_error=True,
                denied=True,
            )
        outcome = context.notebook.apply(change)
        if outcome == "unreachable":
            return self._fallback(change, context, "this frontend's notebook cannot be changed")
        if outcome == "unanswered":  # not proposed too: it may be in the cell already
            raise ToolError(
                f"the notebook did not answer in time: the change to cell {change.cell_id} "
                "may have been applied or not. Read the notebook before another change."
            )
        if outcome != "applied":
            gone = "is gone" if outcome == "missing" else "changed"
            raise ToolError(
                f"cell {change.cell_id} {gone} since the diff was made; {NOTHING}. Read the "
                "notebook again before another change."
            )
        done = {
            "edit": f"Cell {change.cell_id} now holds the new source (it has not run).",
            "insert": f"A new {change.cell_type} cell was inserted after cell "
            f"{change.cell_id} (it has not run).",
            "delete": f"Cell {change.cell_id} was deleted.",
        }
        return ToolOutput(f"{CELL_CHANGE_APPLIED} {done[change.action]}")

    def _fallback(self, change: CellChange, context: ToolContext, why: str) -> ToolOutput:
        """The new source as a proposed cell below the agent cell, where the notebook
        cannot be changed in place."""
        if change.action == "delete" or context.propose_cell is None:
            raise ToolError(
                f"{why}; {NOTHING}. Ask the user to make the change to cell {change.cell_id}."
            )
        where = context.propose_cell(change.new_source)
        return ToolOutput(
            f"Cell {change.cell_id} was not changed: {why}. The new source was proposed as a "
            f"new cell {where} instead; it has not run. Tell the user what to do with it."
        )


class EditCell(CellTool):
    name = "edit_cell"
    action = "edit"
    description = f"Replace the source of a notebook cell, by its id. {SHOWN}"
    Arguments = EditCellArguments


class InsertCell(CellTool):
    name = "insert_cell"
    action = "insert"
    description = f"Insert a new cell after a notebook cell, by its id. {SHOWN}"
    Arguments = InsertCellArguments


class DeleteCell(CellTool):
    name = "delete_cell"
    action = "delete"
    description = f"Delete a notebook cell, by its id. {SHOWN}"
    Arguments = DeleteCellArguments


CELL_TOOLS = {tool.name: tool for tool in (EditCell, InsertCell, DeleteCell)}


def normalized(source: str) -> str:
    return source.replace("\r\n", "\n").replace("\r", "\n")


def is_agent_cell(source: str) -> bool:
    """Whether IPython runs `source` as an agent cell: `%%agent` among the cell magics it
    opens with (`%%time` then `%%agent ...` runs the agent too). Blank lines and indents
    are skipped, as IPython skips them before a cell magic, and again in a magic's body."""
    lines = (line.lstrip() for line in source.split("\n"))
    magics = itertools.takewhile(lambda line: not line or line.startswith("%%"), lines)
    return any(line.startswith(AGENT_MAGIC) for line in magics)


def _source_of(cells: NotebookCells, cell_id: str, *, may_be_agent: bool) -> tuple[int, str]:
    """The cell's 1-based place and source; ToolError when there is no such cell, or it is
    an agent cell a change may not touch."""
    for number, cell in enumerate(cells.cells, 1):
        if cell.id != cell_id:
            continue
        if may_be_agent:
            return number, cell.source
        if cell.id == cells.own_cell_id:
            raise ToolError(f"cell {cell_id} is the running agent cell; {NOTHING}")
        if is_agent_cell(cell.source):
            raise ToolError(f"cell {cell_id} is an {AGENT_MAGIC} cell, the user's; {NOTHING}")
        return number, cell.source
    raise ToolError(f"the notebook has no cell {cell_id}; {NOTHING}. read_notebook lists them.")


def cell_diff(change: CellChange) -> str:
    """The change as the user reviews it: a unified diff of the cell's lines (raw text:
    each surface escapes it as it shows it)."""
    old = change.old_source.split("\n") if change.old_source else []
    new = change.new_source.split("\n") if change.action != "delete" else []
    # By place as read, with the id: the user never sees an id (JupyterLab's are UUIDs).
    cell = f"cell {change.cell_id}"
    if change.position is not None:
        cell = f"cell {change.position} (id {change.cell_id})"
    where = {
        "edit": cell,
        "insert": f"new {change.cell_type} cell after {cell}",
        "delete": f"{cell}, deleted",
    }[change.action]
    hunks = list(difflib.unified_diff(old, new, lineterm="", n=3))[2:]  # not ---/+++
    return "\n".join([where, *hunks])


def change_diff(tool: str, arguments: dict[str, Any]) -> str | None:
    """The diff of a recorded call of a cell tool (raw text); None for any other call."""
    kind = CELL_TOOLS.get(tool)
    if kind is None:
        return None
    made = kind()
    return cell_diff(made.change(made.parse_arguments(arguments)))
