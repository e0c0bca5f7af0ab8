"""The plan of a rewind (docs/spec.md §17): what going back to just before operation K
would do to the files, the conversation and the notebook, computed from the file alone
and the disk as it is now, before anything changes.

Every change of a file the session recorded at or after K, in file order, is one link of
that file's history: a `write_file`/`edit_file` call's "file" member and an earlier
rewind's `fileRestore` alike. Per path, the rewind puts back what the first link found
(`before`/`from`) if the disk still holds what the last link left (`after`/`to`; for a
call or a restore that never finished, either side): otherwise someone else changed the
file, a conflict, which only `--force` overwrites. A path that became a symlink or a
directory is a conflict even then: a rewind never writes through one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..session import FileStore, FileStoreError, Operation, SessionState, ToolIntent
from ..tools import Notebook, Tool, ToolArgumentError, builtin_registry
from ..words import first_line, shorten
from ._kernel_notice import defined_names
from ._restore import Found, digest_of, look
from ._rewind_cells import CellAction, CellPlan, changed_lines, plan_cells, string_or_none
from ._types import AgentError

FileAction = Literal["restore", "unchanged", "conflict", "unrestorable"]
WRITING_TOOLS = ("write_file", "edit_file")  # the calls whose "file" member keeps history


@dataclass(frozen=True)
class Change:
    """One recorded change of the file at `path`."""

    path: str
    before: str | None  # digest the file held before (None: no file)
    before_mode: int | None
    after: str | None  # digest it held after (None: removed)
    finished: bool  # the change is known to have happened (else before or after)
    kept: bool = True  # both contents are in the file store
    why: str | None = None  # why not kept


@dataclass(frozen=True)
class FilePlan:
    path: str
    action: FileAction
    target: str | None  # the digest to put back (None: remove the file)
    mode: int | None  # the mode to put back
    found: Found | str  # the file as it is on disk now (words: not a file to write)
    note: str  # one line: the diff summary, or why not

    @property
    def writes(self) -> bool:
        return self.action == "restore"


@dataclass(frozen=True)
class RewindPlan:
    target: Operation  # the rewind goes back to just before it
    number: int  # its number, as the timeline shows it
    undo: Operation | None  # the rewind this one undoes, for `--undo`
    force: bool
    files: tuple[FilePlan, ...] = ()
    calls: tuple[str, ...] = ()  # bash, python and MCP calls at or after it
    defined: tuple[str, ...] = ()  # names python calls defined at or after it
    cells: tuple[CellPlan, ...] = ()  # the notebook cells changed at or after it
    leaving: int = 0  # runs on the conversation's path that leave it

    def text(self) -> str:
        return "\n".join(_lines(self))


def operation_numbered(state: SessionState, number: int) -> Operation:
    """Operation `number` as the timeline numbers them (file order, every kind, from 1)."""
    operations = list(state.operations.values())
    if not 1 <= number <= len(operations):
        raise AgentError(
            f"there is no run {number}: this session has {len(operations)} "
            "(see the timeline for their numbers)"
        )
    return operations[number - 1]


def undo_target(state: SessionState) -> Operation:
    """What `--undo` rewinds to before: the last rewind, or the first of the rewinds to
    the same place just before it that it finished (interrupted ones) or repeated with
    nothing left to restore: they are one rewind, and undoing a repeat alone undoes
    nothing."""
    operations = list(state.operations.values())
    rewinds = [i for i, op in enumerate(operations) if op.kind == "rewind"]
    if not rewinds:
        raise AgentError("this session has no rewind to undo")
    restoring = {restore.operation_id for restore in state.file_restores.values()}
    index = rewinds[-1]
    while (
        index > 0
        and (previous := operations[index - 1]).kind == "rewind"
        and previous.rewinds_operation_id == operations[index].rewinds_operation_id
        and (previous.status == "interrupted" or operations[index].id not in restoring)
    ):
        index -= 1
    return operations[index]


def plan_rewind(
    state: SessionState,
    target: Operation,
    store: FileStore,
    root: Path,
    *,
    force: bool = False,
    undo: bool = False,
    notebook: Notebook | None = None,
) -> RewindPlan:
    """The plan of a rewind to just before `target`, the files looked at in `root` now
    (`store`: the session's file store), the cells in `notebook` where it is live."""
    if state.open_operation is not None:
        raise AgentError(f"operation {state.open_operation.id} is still open")
    operations = list(state.operations.values())
    start = operations.index(target)
    since = {op.id for op in operations[start:]}
    history: dict[str, list[Change]] = {}
    for change in _changes(state, since):
        history.setdefault(change.path, []).append(change)
    files = tuple(_file_plan(chain, store, root, force) for chain in history.values())
    calls, codes = [], []
    for intent in state.tool_intents.values():
        if intent.operation_id not in since or intent.status == "denied":
            continue
        name, arguments = intent.tool.name, intent.arguments
        if intent.tool.source != "builtin":
            calls.append(f"{intent.tool.source} {name}: {shorten(_json(arguments), 120)}")
        elif name == "bash":
            calls.append(f"bash: {shorten(str(arguments.get('command', '')), 160)}")
        elif name == "python":
            code = str(arguments.get("code", ""))
            codes.append(code)
            calls.append(f"python: {first_line(code, 120)}")
    path_ids = {op.id for op in state.operation_path()}
    return RewindPlan(
        target=target,
        number=start + 1,
        undo=target if undo else None,
        force=force,
        files=files,
        calls=tuple(calls),
        defined=tuple(defined_names(codes)),
        cells=plan_cells(state, since, notebook, force),
        leaving=sum(
            op.id in path_ids and op.kind in ("run", "resume") for op in operations[start:]
        ),
    )


def _changes(state: SessionState, since: set[str]) -> Iterator[Change]:
    """The file changes of the operations `since`, in file order (operations never
    interleave: one is open at a time, and each one's intents and restores are in order)."""
    by_operation: dict[str, list[Change]] = {}
    for restore in state.file_restores.values():
        if restore.operation_id in since:
            finished = state.operations[restore.operation_id].status == "completed"
            change = Change(restore.path, restore.from_, restore.from_mode, restore.to, finished)
            by_operation.setdefault(restore.operation_id, []).append(change)
    writing = builtin_registry().subset(WRITING_TOOLS)
    for intent in state.tool_intents.values():
        if intent.operation_id not in since or intent.tool.source != "builtin":
            continue
        tool = writing.get(intent.tool.name)
        if tool is None or intent.status == "denied" or not _ran(tool, intent):
            continue
        change = _tool_change(intent.arguments, finished=intent.status == "completed")
        by_operation.setdefault(intent.operation_id, []).append(change)
    for op_id in state.operations:
        yield from by_operation.get(op_id, ())


def _ran(tool: Tool, intent: ToolIntent) -> bool:
    """Whether the writing call may have run: not refused before its intent (a tool this
    kernel lacked, arguments that do not fit, what `prepare` read refusing it). Such a
    call's arguments are the model's: a "file" member in them is forged, never history."""
    if intent.tool.version == "unknown":
        return False
    try:
        tool.parse_arguments(intent.arguments)
    except ToolArgumentError:
        return False
    return "file" in intent.arguments or intent.status != "error"


def _tool_change(arguments: dict[str, object], *, finished: bool) -> Change:
    member = arguments.get("file")
    path = str(arguments.get("path", "?"))
    if not isinstance(member, dict):
        # A call recorded before the file history was kept: its content is unknown.
        return Change(path, None, None, None, False, False, "no file history was kept")
    return Change(
        str(member.get("path", path)),
        string_or_none(member.get("before")),
        _mode(member.get("mode")),
        string_or_none(member.get("after")),
        finished,  # one that did not complete may have written or not
        member.get("kept") is True,
        str(member["why"]) if member.get("why") else None,
    )


def _mode(value: object) -> int | None:
    """Permission bits as recorded (`st_mode & 0o7777`); anything else, forged: none."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o7777:
        return value
    return None


def _file_plan(chain: list[Change], store: FileStore, root: Path, force: bool) -> FilePlan:
    first, last = chain[0], chain[-1]
    target, mode = first.before, first.before_mode
    found = look(root, first.path)
    lost = next((c for c in chain if not c.kept), None)
    if isinstance(found, str):
        return FilePlan(
            first.path, "conflict", target, mode, found, f"{found}; never written through"
        )
    digest = digest_of(found.data)
    if digest == target:
        return FilePlan(first.path, "unchanged", target, mode, found, "already as it was")
    if lost is not None:
        return FilePlan(first.path, "unrestorable", target, mode, found, lost.why or "not kept")
    if target is not None and not store.has(target):
        why = "its earlier content is not in the session's file store"
        return FilePlan(first.path, "unrestorable", target, mode, found, why)
    expected = {last.after} if last.finished else {last.before, last.after}
    if digest not in expected:
        note = "changed since the agent's last change (by you or another process)"
        if not force:
            return FilePlan(first.path, "conflict", target, mode, found, note)
        # What --force replaces goes into the store first (for --undo), under its caps:
        # content that cannot be kept is never overwritten, forced or not.
        if found.data is not None and (over := store.fits(found.data)) is not None:
            note = f"{note}, and its content now cannot be kept ({over}): not overwritten"
            return FilePlan(first.path, "unrestorable", target, mode, found, note)
        note = f"{note}; --force restores it"
    try:
        summary = _summary(found.data, None if target is None else store.get(target))
    except FileStoreError as exc:  # damaged on disk since it was kept
        return FilePlan(first.path, "unrestorable", target, mode, found, str(exc))
    if force and digest not in expected:
        summary = f"{summary} ({note})"
    return FilePlan(first.path, "restore", target, mode, found, summary)


def _summary(now: bytes | None, then: bytes | None) -> str:
    """A one-line diff summary of putting `then` where `now` is (None: no file)."""
    if then is None:
        return f"remove it ({len(now or b'')} bytes; it was created after that point)"
    if now is None:
        return f"bring it back ({len(then)} bytes; it was deleted after that point)"
    try:
        old, new = now.decode().splitlines(), then.decode().splitlines()
    except UnicodeDecodeError:
        return f"restore {len(then)} bytes (binary; {len(now)} bytes now)"
    added, removed = changed_lines(old, new)
    return f"restore {len(then)} bytes ({len(now)} bytes now; +{added} -{removed} lines)"


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _lines(plan: RewindPlan) -> Iterator[str]:
    op = plan.target
    if plan.undo is not None:
        yield f"Undo rewind {plan.number}: the files and the conversation as it found them."
    else:
        yield f"Rewind to just before run {plan.number} (a {op.kind}):"
        yield (
            f"  conversation: back to just before it; {plan.leaving} run(s) leave it "
            "(they stay in the session file, the timeline and the CLI; --undo brings them back)"
        )
    groups: list[tuple[str, FileAction]] = [
        ("files to restore", "restore"),
        ("conflicts, left as they are (--force restores them)", "conflict"),
        ("cannot be restored", "unrestorable"),
        ("already as they were", "unchanged"),
    ]
    for title, action in groups:
        rows = [f for f in plan.files if f.action == action]
        if rows:
            yield f"  {title} ({len(rows)}):"
            yield from (f"    {row.path}: {row.note}" for row in rows)
    if not plan.files:
        yield "  files: no file change was recorded after that point"
    if plan.calls:
        yield f"  cannot be undone ({len(plan.calls)} call(s), their effects stay):"
        yield from (f"    {call}" for call in plan.calls)
    if plan.defined:
        yield f"  kernel names python calls defined (they stay): {', '.join(plan.defined)}"
    cell_groups: list[tuple[str, CellAction]] = [
        ("cells to restore", "restore"),
        ("cell conflicts, left as they are (--force restores those still there)", "conflict"),
        ("cells the agent changed (restore them by hand: no live notebook)", "by hand"),
        ("cells already as they were", "unchanged"),
    ]
    for title, cell_action in cell_groups:
        cells = [c for c in plan.cells if c.action == cell_action]
        if cells:
            yield f"  {title} ({len(cells)}):"
            yield from (f"    {cell.line}" for cell in cells)
