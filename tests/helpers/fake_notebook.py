"""A notebook held in memory that implements tools' `Notebook` protocol as the bridge
promises it: a change is applied only if its cell still holds what it was made from."""

from __future__ import annotations

from dataclasses import replace

from tiny_agent_nb.tools._notebook import (
    ApplyOutcome,
    CellChange,
    NotebookCell,
    NotebookCells,
)


class FakeNotebook:
    def __init__(
        self, *sources: str, own: str | None = None, reachable: bool = True, live: bool = True
    ) -> None:
        """One code cell per source, with ids `c0`, `c1`, ...; `own`: the running agent
        cell's id; not `reachable`: every apply answers "unreachable"."""
        self.cells = [
            NotebookCell(f"c{i}", "code", source, ran=False) for i, source in enumerate(sources)
        ]
        self.own = own
        self.reachable = reachable
        self.live = live
        self.applied: list[CellChange] = []

    def source(self, cell_id: str) -> str | None:
        return next((c.source for c in self.cells if c.id == cell_id), None)

    def read(self) -> NotebookCells:
        return NotebookCells(tuple(self.cells), live=self.live, own_cell_id=self.own)

    def apply(self, change: CellChange) -> ApplyOutcome:
        if not self.reachable:
            return "unreachable"
        at = next((i for i, c in enumerate(self.cells) if c.id == change.cell_id), None)
        if at is None:
            return "missing"
        if change.action != "insert" and self.cells[at].source != change.old_source:
            return "changed"
        if change.action == "edit":
            self.cells[at] = replace(self.cells[at], source=change.new_source)
        elif change.action == "delete":
            del self.cells[at]
        else:
            made = change.new_cell_id or f"c{len(self.applied)}new"
            new = NotebookCell(made, change.cell_type, change.new_source, False)
            self.cells.insert(at + 1, new)
        self.applied.append(change)
        return "applied"
