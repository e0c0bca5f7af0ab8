"""The Resume button under a run that stopped before its answer (a run's control, see
_controls.py): a click runs `%agent resume` on the main shell once it is free."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ._controls import Control, Record
from ._timeline_view import Publish, ipython_publish


class ResumeOffer:
    """A Resume button under a run that stopped before its answer. A click runs what
    `%agent resume` runs (`resume`), on the main thread once it is free, its output under
    this cell's; the kernel never runs it on the thread that handled the click."""

    def __init__(
        self,
        resume: Callable[[], None],
        schedule: Callable[[Callable[[], None]], None],
        *,
        options: str | None = None,
        publish: Publish = ipython_publish,
    ) -> None:
        """`options`: the words of the options the resume keeps (`resume_words`), shown
        beside the button, so the click continues the run as it is seen to."""
        import ipywidgets as w  # noqa: PLC0415

        self._resume = resume
        self._schedule = schedule
        self._lock = threading.Lock()
        self._clicked = False
        self._button = w.Button(
            description="Resume",
            icon="play",
            button_style="primary",
            tooltip="Continue this run, as `%agent resume` does"
            + (f": {options}" if options else ""),
        )
        self._button.on_click(lambda _: self._click())
        kept = f": {options}" if options else ""
        waiting = Record.of(
            f"↻ `%agent resume` continues this run{kept} (the Resume button shown here "
            "needs the kernel that showed it)"
        )
        self.control = Control(w.HBox([self._button]), waiting, publish)

    def _click(self) -> None:
        with self._lock:
            if self._clicked or self.control.settled:
                return
            self._clicked = True
        # Said at once, from whichever thread handles the click: the kernel may be busy.
        self._button.disabled = True
        self._button.description = "Resume: waiting for the kernel"
        self._schedule(self._run)

    def _run(self) -> None:
        if self.control.settled:  # a run started before the kernel got to this one
            return
        self.control.settle(Record.of("↻ resumed by you (as `%agent resume`)"))
        self._resume()

    def withdraw(self) -> None:
        """A later run started (or the session changed, or the extension was unloaded):
        the button would no longer resume what it was shown under."""
        first = "↻ clicked, but another run started first; " if self._clicked else "↻ "
        self.control.settle(Record.of(f"{first}`%agent resume` continues the latest stopped run"))
