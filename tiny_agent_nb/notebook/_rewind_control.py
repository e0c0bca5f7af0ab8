"""The timeline's "Rewind to before this run" buttons.

Each run row of the timeline's HTML carries its command as a muted hint (render.py:
`↶ %agent rewind 3`), which a reopened notebook shows. Where a person answers in a live
Jupyter frontend (`controls_available`), the timeline is a control (_controls.py): its
record is that HTML, kept in the notebook; its widget draws the same HTML, made and
escaped by render.py, and turns each hint into a button (anything else it shows is set
as text). A click sends `{"rewind": K}`: the kernel takes it only for a run on screen,
refuses it while a run is open, and otherwise calls the hook with K on the main thread
once it is free, its output under the timeline's cell (as a Resume button's run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from ..render import REWINDABLE
from ..timeline import Timeline
from ._comm_pump import later_in_this_cell
from ._controls import Control, Record, controls_available
from ._opening import NotebookError
from ._timeline_view import Publish, ipython_publish

if TYPE_CHECKING:
    from ._runtime import NotebookRuntime

RUN_OPEN = "a run is going on; rewind after it ends"

ESM = r"""
const STYLE = "width:auto;height:auto;line-height:18px;padding:0 6px;margin-left:6px;"
  + "font-size:11px";

export default {
  render({ model, el }) {
    const said = document.createElement("div");
    said.className = "tan-rewind-said";
    said.style.cssText = "margin:2px 0;font-weight:600";
    const box = document.createElement("div");
    const draw = () => {
      // render.py's HTML, as the record's: every string of the session escaped there.
      box.innerHTML = model.get("html");
      for (const hint of box.querySelectorAll(".tan-rewind[data-run]")) {
        const run = Number(hint.dataset.run);
        if (!Number.isInteger(run)) continue;
        const button = document.createElement("button");
        button.type = "button";
        button.className = "jupyter-widgets jupyter-button widget-button tan-rewind";
        button.style.cssText = STYLE;
        button.dataset.run = String(run);
        button.textContent = "↶ Rewind to before this run";
        button.title = `Rewind to before run ${run} (%agent rewind ${run}): the plan first`;
        button.setAttribute("aria-label", `Rewind to before run ${run}`);
        // In the run's <summary>: the click is the button's, the row does not fold.
        button.addEventListener("click", (event) => {
          event.preventDefault();
          model.send({ rewind: run });
        });
        hint.replaceWith(button);
      }
    };
    const say = () => {
      said.textContent = model.get("said");
      said.hidden = !said.textContent;
    };
    model.on("change:html", draw);
    model.on("change:said", say);
    draw();
    say();
    el.append(said, box);
    return () => {
      model.off("change:html", draw);
      model.off("change:said", say);
    };
  },
};
"""


class RewindButtons(anywidget.AnyWidget):
    """`html` (render.py's timeline) with its rewind hints as buttons; `said` above it."""

    _esm = ESM
    html = traitlets.Unicode("").tag(sync=True)
    said = traitlets.Unicode("").tag(sync=True)


class RewindControl:
    """A live timeline's record and widget. `hook(K)` runs on the main thread, as part
    of the timeline's cell, for each click on run K's button taken."""

    def __init__(
        self,
        hook: Callable[[int], None],
        schedule: Callable[[Callable[[], None]], None],
        publish: Publish = ipython_publish,
    ) -> None:
        self._hook = hook
        self._schedule = schedule
        self._publish = publish
        self._lock = threading.Lock()
        self._runs: frozenset[int] = frozenset()  # the buttons on screen
        self._run_open = False
        self._control: Control | None = None
        self.widget = RewindButtons()
        self.widget.on_msg(self._received)

    @classmethod
    def where_available(
        cls, shell: Any, runtime: NotebookRuntime, rewind: Callable[[int], None]
    ) -> RewindControl | None:
        """A control where a person clicks (else None: the timeline shows the hints). A
        click on run K calls the runtime's `on_rewind(K)`, read at each click, else
        `rewind(K)` (what `%agent rewind K` does: the plan first)."""
        schedule = later_in_this_cell(shell) if controls_available(shell) else None
        if schedule is None:
            return None

        def hook(run: int) -> None:
            (runtime.on_rewind or rewind)(run)

        return cls(hook, schedule)

    def draw(self, bundle: dict[str, str], timeline: Timeline) -> None:
        """Show (the first time) or update the timeline `bundle` draws as the record and
        the widget."""
        runs = frozenset(run.number for run in timeline.runs if run.kind in REWINDABLE)
        run_open = any(run.status == "open" for run in timeline.runs)
        with self._lock:
            self._runs, self._run_open = runs, run_open
        with self.widget.hold_sync():
            self.widget.html = bundle["text/html"]
            if not run_open and self.widget.said == RUN_OPEN:
                self.widget.said = ""
        record = Record(bundle["text/plain"], bundle["text/html"])
        if self._control is None:
            self._control = Control(self.widget, record, self._publish)
        else:
            self._control.update(record)

    def settle(self, bundle: dict[str, str]) -> None:
        """The view closed: `bundle` is what stays; the widget goes."""
        with self._lock:
            self._runs = frozenset()
        if self._control is not None:
            self._control.settle(Record(bundle["text/plain"], bundle["text/html"]))

    def _received(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A click, on whichever thread handles the comm. Anything but `{"rewind": K}`
        for a button on screen is ignored."""
        if not isinstance(content, dict) or content.keys() != {"rewind"}:
            return
        run = content["rewind"]
        if type(run) is not int:  # not a bool, a float or a string
            return
        with self._lock:
            if run not in self._runs:
                return
            run_open = self._run_open
        if run_open:
            self.widget.said = RUN_OPEN
            return
        self.widget.said = ""
        self._schedule(lambda: self._rewind(run))

    def _rewind(self, run: int) -> None:
        try:
            self._hook(run)
        except NotebookError as exc:
            print(exc)
