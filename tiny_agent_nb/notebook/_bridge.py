"""The notebook the tools see (tools/_notebook.py's `Notebook`): the live notebook of a
JupyterLab 4 or Notebook 7 page, through an anywidget, else the saved `.ipynb`.

The widget is never displayed: opening its comm makes each frontend's widget manager
create its model, whose `initialize` says hello and answers the kernel's requests. It
reaches the notebook through `model.widget_manager.context.model.sharedModel` (the
shared, Yjs-backed model JupyterLab saves and collaborates on), which neither anywidget
nor ipywidgets promises: where a frontend lacks it (VS Code, Colab, a widget manager
without a document context, as ipywidgets PR #3922 would make JupyterLab's), or no
frontend answers (nbclient, a terminal), `read` gives the saved file with `live=False`
and `apply` says "unreachable". Every wait is bounded.

A change is applied in one `transact` of the notebook's shared model, after checking that
its cell still holds `old_source`: the notebook's own undo (`z`, Edit > Undo) takes it
back, and no cell runs. The running cell asks while the kernel is busy, so the answers
come through the run's controls' subshell or the comm pump (_comm_pump.py).
"""

from __future__ import annotations

import json
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from itertools import count
from pathlib import Path
from typing import Any, cast, get_args

from ..render import cell_text
from ..tools import ApplyOutcome, CellChange, CellType, NotebookCell, NotebookCells, ToolError
from ._comm_pump import CommPump, handle_on_controls_subshell
from ._controls import controls_available

FIRST_CONTACT = 10.0  # s for a frontend's hello after the widget's comm opened
REPLY_TIMEOUT = 10.0  # s for a frontend that said hello to answer a request
# s for this kernel's notebook to say hello after another frontend (a console, another
# notebook on the kernel) did, on the first contact
GRACE = 0.5
MAX_NOTEBOOK_BYTES = 64 << 20  # a bigger saved notebook is not read
OUTCOMES = ("applied", "changed", "missing")
# nbformat 4.5's cell id: what read_notebook prints beside each cell's fence, so no id
# from a crafted file or frontend can add lines of its own there.
CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")

ESM = r"""
function sharedNotebook(model) {
  try {
    const notebook = model.widget_manager.context.model;
    return notebook && notebook.sharedModel && Array.isArray(notebook.sharedModel.cells)
      ? notebook.sharedModel : null;
  } catch (error) { return null; }
}

function cellsOf(shared) {
  return shared.cells.map((cell) => ({
    id: cell.id, cell_type: cell.cell_type, source: cell.getSource(),
    ran: cell.cell_type === "code" && cell.execution_count != null,
  }));
}

function apply(shared, change) {
  const at = shared.cells.findIndex((cell) => cell.id === change.cell_id);
  if (at < 0) return "missing";
  const cell = shared.cells[at];
  if (change.action !== "insert" && cell.getSource() !== change.old_source) return "changed";
  // One transaction of the notebook's: its undo (`z`) takes all of it back.
  shared.transact(() => {
    if (change.action === "edit") cell.setSource(change.new_source);
    else if (change.action === "delete") shared.deleteCell(at);
    else shared.insertCell(at + 1, {
      id: change.new_cell_id, cell_type: change.cell_type, source: change.new_source,
    });
  });
  return "applied";
}

export default {
  initialize({ model }) {
    // Not crypto.randomUUID: a page served over plain http from another host lacks it.
    const frontend = Math.random().toString(36).slice(2) + Date.now().toString(36);
    let path = null;
    try { path = model.widget_manager.context.path; } catch (error) { /* no context */ }
    model.send({ op: "hello", frontend, path, reachable: sharedNotebook(model) !== null });
    model.on("msg:custom", (request) => {
      if (request.frontend && request.frontend !== frontend) return;
      const shared = sharedNotebook(model);
      const reply = { op: "reply", id: request.id, frontend, reachable: shared !== null };
      if (shared && request.op === "read") reply.cells = cellsOf(shared);
      if (shared && request.op === "apply") reply.outcome = apply(shared, request.change);
      model.send(reply);
    });
  },
};
"""


class LiveNotebook:
    """`Notebook` for one kernel. `saved`: the path of the notebook's file, where known."""

    def __init__(self, shell: Any, saved: Callable[[], Path | None]) -> None:
        self._shell = shell
        self._saved = saved
        self._widget: Any = None
        self._opened = 0.0  # when the widget's comm opened (monotonic)
        self._ids = count(1)
        self._lock = threading.RLock()  # `_wait` holds it around conditions that take it
        self._arrived = threading.Event()  # set on each message from a frontend
        # Frontends that said hello: whether each reaches a notebook model.
        self._frontends: dict[str, bool] = {}
        self._paths: dict[str, str] = {}  # the notebook each one shows, as the server names it
        self._asked = 0  # the request waited for: only its first reply is kept
        self._reply: dict[str, Any] | None = None
        self._chosen: str | None = None  # the frontend that answered last

    def read(self) -> NotebookCells:
        reply = self._request({"op": "read"}) if self._contact() else None
        cells = None if reply is None else _cells(reply.get("cells"))
        if cells is None:
            return self._saved_cells()
        return NotebookCells(cells, live=True, own_cell_id=self._own_cell_id())

    def apply(self, change: CellChange) -> ApplyOutcome:
        """Call it on the kernel's main thread (the running cell), never from a comm
        handler: the frontend's answer is handled on that handler's thread. Past
        REPLY_TIMEOUT it says "unanswered": a frontend that answers late may have
        applied it."""
        if not self._contact():
            return "unreachable"  # nothing was asked
        reply = self._request({"op": "apply", "change": asdict(change)}, to_last=True)
        if reply is None:
            return "unanswered"
        outcome = reply.get("outcome")
        return cast(ApplyOutcome, outcome) if outcome in OUTCOMES else "unreachable"

    def close(self) -> None:
        if self._widget is not None:
            self._widget.close()
            self._widget = None

    # ------------------------------------------------------------------ the frontends
    def _request(self, message: dict[str, Any], *, to_last: bool = False) -> dict[str, Any] | None:
        """The first reply of a frontend with a notebook, or None when none answers in
        time (those that did not are forgotten: a closed page). Asked: with `to_last`,
        the frontend that answered last (a change goes where it was read); else one
        showing this kernel's notebook; else all of them. Asked after `_contact`."""
        with self._lock:
            last = self._chosen if to_last and self._frontends.get(self._chosen or "") else None
            target = last or self._ours()
            self._asked, self._reply = next(self._ids), None
        self._widget.send({**message, "id": self._asked, "frontend": target})
        reply: dict[str, Any] | None = self._wait(lambda: self._reply, REPLY_TIMEOUT)
        with self._lock:
            if reply is None:
                self._frontends.clear()
                self._paths.clear()
                self._chosen = None
            else:
                self._chosen = reply["frontend"]
        return reply

    def _ours(self) -> str | None:
        """A frontend showing this kernel's notebook by name, where another notebook
        shares the kernel; None (ask them all) when none does, as after a rename."""
        saved = self._saved()
        with self._lock:
            return next(
                (
                    frontend
                    for frontend, path in self._paths.items()
                    if saved is not None
                    and self._frontends.get(frontend)
                    and path.rsplit("/", 1)[-1] == saved.name
                ),
                None,
            )

    def _contact(self) -> bool:
        """Whether a frontend with a notebook said hello: waits for one once, after the
        widget opened, where a person may be watching (no nbclient, no terminal)."""
        if self._widget is None:
            if not controls_available(self._shell):
                return False
            self._open()
        if self._reachable():
            return True
        waited = time.monotonic() - self._opened
        if waited >= FIRST_CONTACT:
            return False
        first: list[float] = []

        def found() -> bool:
            if self._ours() is not None:
                return True
            if self._frontends and not first:
                first.append(time.monotonic())
            # Another notebook sharing the kernel, or a console, said hello first: this
            # kernel's notebook gets a moment to say its own before they are asked.
            return bool(first) and time.monotonic() - first[0] > GRACE

        self._wait(found, FIRST_CONTACT - waited)
        return self._reachable()

    def _reachable(self) -> bool:
        with self._lock:
            return any(self._frontends.values())

    def _open(self) -> None:
        widget = _bridge_widget()
        widget.on_msg(self._received)
        comm = getattr(widget, "comm", None)
        if comm is not None:  # answers taken while the cell runs
            handle_on_controls_subshell([comm])
        self._widget = widget
        self._opened = time.monotonic()

    def _received(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A frontend's message, on whichever thread handles the comm."""
        if not isinstance(content, dict) or not isinstance(content.get("frontend"), str):
            return
        frontend, reachable = content["frontend"], content.get("reachable") is True
        with self._lock:
            if content.get("op") == "hello":
                self._frontends[frontend] = reachable
                if isinstance(content.get("path"), str):
                    self._paths[frontend] = content["path"]
            elif content.get("op") == "reply" and reachable and content.get("id") == self._asked:
                self._frontends[frontend] = True
                self._reply = self._reply or content
        self._arrived.set()

    def _wait(self, done: Callable[[], Any], seconds: float) -> Any:
        """`done()` once true (its value), or None after `seconds`; comm messages are
        pumped meanwhile. Ctrl-C ends the wait."""
        pump = CommPump.of(self._shell)
        end = time.monotonic() + seconds
        while True:
            with self._lock:
                value = done()
            if value or time.monotonic() >= end:
                return value or None
            self._arrived.clear()
            if pump is not None:
                pump.pump()
            self._arrived.wait(min(0.02, max(end - time.monotonic(), 0)))

    def _own_cell_id(self) -> str | None:
        try:
            cell_id = self._shell.kernel.get_parent("shell")["metadata"]["cellId"]
        except Exception:  # no kernel, or a client that does not say (nbclient may not)
            return None
        return cell_id if isinstance(cell_id, str) else None

    # ------------------------------------------------------------------ the saved file
    def _saved_cells(self) -> NotebookCells:
        path = self._saved()
        if path is None:
            raise ToolError(
                "no notebook could be read: no Jupyter frontend answered with a live notebook, "
                "and this kernel does not know its notebook's file (it was not started by "
                "JupyterLab, Notebook 7 or VS Code)"
            )
        name = cell_text(path.name)
        try:
            if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block the read for ever
                raise ToolError(f"the saved notebook {name} is not a regular file; not read")
            with path.open("rb") as file:
                data = file.read(MAX_NOTEBOOK_BYTES + 1)
        except OSError as exc:
            raise ToolError(f"the saved notebook {name} could not be read: {exc.strerror}") from exc
        if len(data) > MAX_NOTEBOOK_BYTES:
            raise ToolError(f"the saved notebook {name} is larger than 64 MB; not read")
        try:
            cells = _cells(_saved_json_cells(json.loads(data)))
        except (ValueError, RecursionError):  # not JSON; nested too deep to parse
            cells = None
        if cells is None:
            raise ToolError(f"the saved notebook {name} is not a notebook (nbformat 4)")
        return NotebookCells(cells, live=False, own_cell_id=self._own_cell_id())


def _bridge_widget() -> Any:
    """The widget, never displayed (anywidget imported only when a tool first asks)."""
    import anywidget  # noqa: PLC0415

    return anywidget.AnyWidget(_esm=ESM)


def _saved_json_cells(notebook: Any) -> Any:
    """The saved cells in the shape a frontend sends them."""
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return None
    cells = []
    for index, cell in enumerate(notebook["cells"]):
        if not isinstance(cell, dict):
            return None
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        cells.append(
            {
                # nbformat before 4.5 had no ids: one the model can name, never found live
                "id": cell.get("id", f"saved-{index + 1}"),
                "cell_type": cell.get("cell_type"),
                "source": source,
                "ran": isinstance(cell.get("execution_count"), int),
            }
        )
    return cells


def _cells(raw: Any) -> tuple[NotebookCell, ...] | None:
    """Cells from a frontend's reply or a saved file; None if they are not well formed."""
    if not isinstance(raw, list):
        return None
    cells = []
    for cell in raw:
        if not (
            isinstance(cell, dict)
            and isinstance(cell.get("id"), str)
            and CELL_ID.fullmatch(cell["id"])
            and cell.get("cell_type") in get_args(CellType)
            and isinstance(cell.get("source"), str)
        ):
            return None
        kind = cast(CellType, cell["cell_type"])
        ran = kind == "code" and cell.get("ran") is True
        cells.append(NotebookCell(cell["id"], kind, cell["source"], ran))
    return tuple(cells)
