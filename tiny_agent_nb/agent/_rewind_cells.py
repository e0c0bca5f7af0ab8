"""The notebook cells of a rewind (docs/spec.md §17): each cell the cell tools changed at
or after K put back as it was, through the live notebook's `apply`, under the files' rule.

Every applied change of a cell (its call completed with the change applied; one that was
interrupted may have applied it or not) is one link of that cell's history, from the
intent's arguments: the source before (`old_source`; none for an inserted cell) and after
(none for a deleted one). Per cell the rewind puts back what the first link found if the
notebook still holds what the last one left: the inverse change (an edit back; an
inserted cell, by the id it was given, deleted; a deleted cell inserted again after the
cell it followed, with its id). `apply` itself refuses a cell that no longer holds what
the change was made from, so a cell changed after the plan is never overwritten either.
Cells are restored newest first, so a cell deleted after its neighbour was comes back
after it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from ..session import SessionState, ToolResultEntry
from ..tools import CELL_CHANGE_APPLIED, CellChange, CellType, Notebook, ToolError
from ..words import first_line

CellAction = Literal["restore", "unchanged", "conflict", "by hand"]
_TOOLS = ("edit_cell", "insert_cell", "delete_cell")


@dataclass(frozen=True)
class _Link:
    cell_id: str
    before: str | None  # the cell's source before (None: no such cell)
    after: str | None
    finished: bool  # known applied (else before or after)
    place: str  # "3 of 10", as the call read it
    cell_type: CellType
    previous: str | None  # a deleted cell: the cell it followed


@dataclass(frozen=True)
class CellPlan:
    cell_id: str
    action: CellAction
    change: CellChange | None  # what `apply` is asked, for "restore"
    where: str  # "cell 3 of 10" in the notebook now; a deleted one: where it was
    note: str  # one line: what restoring it does, or why not

    @property
    def line(self) -> str:
        return f"{self.where}: {self.note} (id {self.cell_id})"


def plan_cells(
    state: SessionState, since: set[str], notebook: Notebook | None, force: bool
) -> tuple[CellPlan, ...]:
    """The plan of the cells changed by the operations `since`, as the notebook holds
    them now; "by hand" for each where no live notebook can be read."""
    chains: dict[str, list[_Link]] = {}
    for link in _links(state, since):
        chains.pop(link.cell_id, None)  # ordered by their last link
        chains[link.cell_id] = [*chains.get(link.cell_id, []), link]
    if not chains:
        return ()
    cells = None
    if notebook is not None:
        try:
            cells = notebook.read()
        except ToolError:
            cells = None
    if cells is None or not cells.live:
        return tuple(
            CellPlan(i, "by hand", None, f"cell {c[0].place}", _what(c[-1].after, c[0].before))
            for i, c in reversed(chains.items())
            if c[0].before != c[-1].after or not c[-1].finished
        )
    # The notebook as each restore leaves it, so the next one is planned from there.
    sources = {cell.id: cell.source for cell in cells.cells}
    order = [cell.id for cell in cells.cells]
    places = {cell_id: f"cell {n} of {len(order)}" for n, cell_id in enumerate(order, 1)}
    plans = []
    for cell_id, chain in reversed(chains.items()):
        where = places.get(cell_id, f"deleted cell (was {chain[0].place})")
        plan = _cell_plan(chain, sources.get(cell_id), order, where, force)
        plans.append(plan)
        if plan.change is None:
            continue
        if plan.change.action == "delete":
            del sources[cell_id]
            order.remove(cell_id)
        else:
            sources[cell_id] = plan.change.new_source
            if plan.change.action == "insert":
                order.insert(order.index(plan.change.cell_id) + 1, cell_id)
    return tuple(plans)


def _links(state: SessionState, since: set[str]) -> Iterator[_Link]:
    for intent in state.tool_intents.values():
        tool = intent.tool
        if intent.operation_id not in since or tool.source != "builtin" or tool.name not in _TOOLS:
            continue
        result = state.entries.get(intent.result_entry_id)
        applied = (
            result is not None
            and isinstance(result.entry, ToolResultEntry)
            and result.entry.message.content.startswith(CELL_CHANGE_APPLIED)
        )
        if not applied and intent.status != "interrupted":
            continue  # rejected, refused, proposed as a new cell instead, or still open
        a = intent.arguments
        old, new = string_or_none(a.get("old_source")), string_or_none(a.get("source"))
        number, count = a.get("cell_number"), a.get("cell_count")
        if intent.tool.name == "insert_cell" and isinstance(number, int):
            number, count = number + 1, (count or 0) + 1  # the new cell's place
        place = f"{number or '?'} of {count or '?'}"
        if intent.tool.name == "edit_cell":
            link = _Link(str(a.get("cell_id")), old, new, applied, place, "code", None)
        elif intent.tool.name == "insert_cell":
            made = a.get("new_cell_id")
            if not isinstance(made, str):
                continue  # recorded before inserted cells were given their id: not found
            kind = _kind(a.get("cell_type"))
            link = _Link(made, None, new, applied, place, kind, None)
        else:
            kind, previous = _kind(a.get("old_cell_type")), a.get("previous_cell_id")
            previous = string_or_none(previous)
            link = _Link(str(a.get("cell_id")), old, None, applied, place, kind, previous)
        yield link


def string_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _kind(value: object) -> CellType:
    return value if value in ("markdown", "raw") else "code"


def _cell_plan(
    chain: list[_Link], now: str | None, order: list[str], where: str, force: bool
) -> CellPlan:
    """`order`: the cells' ids as the restores planned before this one leave them."""
    first, last = chain[0], chain[-1]
    cell_id, target = first.cell_id, first.before
    if now == target:
        return CellPlan(cell_id, "unchanged", None, where, "already as it was")
    expected = {last.after} if last.finished else {last.before, last.after}
    if now not in expected and (not force or now is None):
        why = "gone" if now is None else "changed since the agent's last change"
        return CellPlan(cell_id, "conflict", None, where, f"{why}; left as it is")
    if target is None:
        assert now is not None
        change = CellChange("delete", cell_id, now, "")
    elif now is not None:
        change = CellChange("edit", cell_id, now, target)
    elif last.previous is None or last.previous not in order:
        why = "it was the first cell" if last.previous is None else "the cell it followed is gone"
        return CellPlan(cell_id, "by hand", None, where, f"{_what(now, target)}; {why}")
    else:
        change = CellChange("insert", last.previous, "", target, last.cell_type, None, cell_id)
    forced = " (--force: changed since the agent's last change)" if now not in expected else ""
    return CellPlan(cell_id, "restore", change, where, f"{_what(now, target)}{forced}")


def _what(now: str | None, then: str | None) -> str:
    """One line: what putting `then` where `now` is does (None: no cell)."""
    if then is None:
        return f"remove the cell the agent inserted ({_head(now)})"
    if now is None:
        return f"bring back the cell the agent deleted ({_head(then)})"
    added, removed = changed_lines(now.split("\n"), then.split("\n"))
    return f"put back its source before (+{added} -{removed} lines; {_head(then)})"


def changed_lines(old: list[str], new: list[str]) -> tuple[int, int]:
    """Lines added and removed going from `old` to `new` (a rewind's one-line summaries);
    0, 0 past 20,000 lines, where a diff costs more than it tells."""
    if len(old) + len(new) > 20_000:
        return 0, 0
    diff = list(difflib.unified_diff(old, new, lineterm="", n=0))[2:]  # no ---/+++ header
    return sum(line.startswith("+") for line in diff), sum(line.startswith("-") for line in diff)


def _head(source: str | None) -> str:
    lines = (source or "").count("\n") + 1
    return f"{lines} line(s): {first_line(source or '', 60) or '(empty)'}"


def restore_cells(notebook: Notebook | None, plans: tuple[CellPlan, ...]) -> Iterator[str]:
    """Apply each planned restore (on the kernel's main thread), newest first; a line for
    each: restored, or left and why."""
    words = {
        "changed": "it changed since the plan; left as it is",
        "missing": "it (or the cell it follows) is gone; left as it is",
        "unreachable": "no live notebook could be reached; restore it by hand",
        "unanswered": "the notebook did not answer in time: it may be restored; look at it",
    }
    for plan in plans:
        if plan.change is None:
            continue
        outcome = "unreachable" if notebook is None else notebook.apply(plan.change)
        said = "restored" if outcome == "applied" else words[outcome]
        yield f"{plan.where} (id {plan.cell_id}): {said}"
