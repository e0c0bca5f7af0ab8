"""The notebook the agent works on, as the tools see it: its cells, in order, as the live
notebook holds them (unsaved edits included), and a change to one of them applied only
if the cell still holds what the change was made from. The notebook layer implements
`Notebook` (an anywidget bridge to the frontend's notebook model, or the saved file where
no frontend answers); tools only speak of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

CellType = Literal["code", "markdown", "raw"]
ChangeAction = Literal["edit", "insert", "delete"]
# How applying a change ended: done; refused because the cell no longer holds what the
# change was made from (or is gone); no live notebook could be reached (nothing was
# asked); or it was asked and did not answer in time (it may have applied it).
ApplyOutcome = Literal["applied", "changed", "missing", "unreachable", "unanswered"]


@dataclass(frozen=True)
class NotebookCell:
    id: str  # the cell's nbformat id
    cell_type: CellType
    source: str
    ran: bool  # a code cell with an execution count


@dataclass(frozen=True)
class NotebookCells:
    cells: tuple[NotebookCell, ...]
    live: bool  # False: read from the saved file, which lacks unsaved edits
    own_cell_id: str | None  # the running agent cell, where known


@dataclass(frozen=True)
class CellChange:
    action: ChangeAction
    cell_id: str  # edit, delete: the cell changed; insert: the cell the new one follows
    old_source: str  # what the change was made from ("" for an insert)
    new_source: str  # "" for a delete
    cell_type: CellType = "code"  # an inserted cell's type
    position: str | None = None  # "3 of 10": the cell's place when the change was made
    new_cell_id: str | None = None  # an insert: the new cell's id (None: the notebook's choice)


class Notebook(Protocol):
    def read(self) -> NotebookCells:
        """The notebook's cells; raises ToolError when neither the live notebook nor a
        saved file can be read."""
        ...

    def apply(self, change: CellChange) -> ApplyOutcome:
        """Applies `change` if its cell still holds `old_source`; never runs a cell."""
        ...
