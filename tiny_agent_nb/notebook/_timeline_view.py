"""`%agent timeline`: runs → attempts → tool intents → usage, as one display updated in place.

Plain rich output (HTML and text) with a display id, re-rendered (throttled) as facts
commit: a saved notebook holds the latest timeline, readable with no kernel in any
frontend or export (no widget model to lose). Where a person clicks, that output is the
record of a control whose widget, shown while the kernel lives, has a Rewind button per run
(_rewind_control.py). A view follows the session it was opened on; when this kernel
switches or closes it, the view draws its last state as closed.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from IPython.display import display, update_display

from ..render import superseded_rule, timeline_html, timeline_text
from ..session import Fact, RecordFact, SessionState
from ..timeline import build_timeline
from ._opening import NotebookError

if TYPE_CHECKING:
    from ._rewind_control import RewindControl

REFRESH_INTERVAL = 0.25  # s between renders while facts stream in; perf: row "timeline-refresh"

log = logging.getLogger(__name__)


class Publish(Protocol):
    """Show (`update=False`) or replace (`update=True`) the display `display_id`."""

    def __call__(self, bundle: dict[str, Any], *, display_id: str, update: bool) -> None: ...


def ipython_publish(bundle: dict[str, Any], *, display_id: str, update: bool) -> None:
    if update:
        update_display(bundle, raw=True, display_id=display_id)
    else:
        display(bundle, raw=True, display_id=display_id)


class SessionSource(Protocol):
    """What a view reads: `NotebookRuntime` (the owner of "the current session")."""

    def read_state(self) -> tuple[SessionState, str | None]: ...

    def watch(self, watcher: Callable[[Sequence[Fact]], None]) -> Callable[[], None]: ...


# Who draws a timeline: this kernel process. A later kernel's timeline of the same
# session marks this one's superseded if it was left with a run open (render.py).
KERNEL = uuid.uuid4().hex[:16]

CLOSED_NOTE = (
    "this session is closed in this kernel: this is its last state; "
    "`%agent timeline` shows the current session"
)


def superseding_bundle(session_id: str) -> dict[str, str]:
    """An output with no text of its own that marks the timelines a stopped kernel left
    with a run open superseded (shown by the kernel that settled that run). JupyterLab
    hides the output itself; a text export sees an empty one."""
    rule = superseded_rule(session_id, KERNEL)
    hide = "<style>.jp-OutputArea-child:has(.tan-superseding){display:none}</style>"
    return {"text/plain": "", "text/html": f'{rule}{hide}<div class="tan-superseding"></div>'}


class TimelineView:
    def __init__(
        self,
        source: SessionSource,
        *,
        live: bool,
        publish: Publish = ipython_publish,
        clock: Callable[[], float] = time.monotonic,
        rewind: RewindControl | None = None,
    ) -> None:
        """`live`: re-render as facts commit (a Jupyter frontend); without it (terminal
        IPython, where an update would print the whole timeline again) the view is
        drawn once and again only by `refresh`. `rewind`: where given, it draws the
        timeline, as a record and a widget with a Rewind button per run."""
        self._source = source
        self._rewind = rewind
        self._publish = publish
        self._display_id = f"tan-timeline-{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._throttle = Throttle(REFRESH_INTERVAL, self.refresh, clock)
        state, self._note = source.read_state()
        self._session_id = state.header.id
        self._drawn = (state.last_seq, self._note)  # what the display shows now
        self._timeline = build_timeline(state)
        self.closed = False
        self._unwatch = source.watch(self.on_commit) if live else None

    def show(self) -> None:
        self._draw(update=False)

    def _draw(self, *, update: bool) -> None:
        bundle = self.bundle()
        if self._rewind is None:
            self._publish(bundle, display_id=self._display_id, update=update)
        elif self.closed:
            self._rewind.settle(bundle)
        else:
            self._rewind.draw(bundle, self._timeline)
        self._throttle.rendered()

    def bundle(self) -> dict[str, str]:
        return {
            "text/plain": timeline_text(self._timeline, note=self._note),
            "text/html": timeline_html(self._timeline, note=self._note, drawn_by=KERNEL),
        }

    def refresh(self) -> None:
        """Draw the session as of now; once it is no longer this kernel's current
        session, draw its last state as closed and stop."""
        if self.closed:
            return
        # Read before taking the view's lock, never under it: a commit holds the store's
        # lock while it tells this view (and so waits for the view's lock), so a trailing
        # render reading under the view's lock would wait for that commit to end while
        # the commit waits for it: the kernel would stall mid-run.
        try:
            state, note = self._source.read_state()
        except NotebookError:
            state, note = None, None  # no session open any more
        with self._lock:
            if self.closed:
                return
            if state is None or state.header.id != self._session_id:
                self._close()
            elif state.last_seq < self._drawn[0] or (state.last_seq, note) == self._drawn:
                # Nothing new (most cells commit nothing), or read before a commit that
                # another thread has drawn since: the display never goes back.
                return
            else:
                self._timeline, self._note = build_timeline(state), note
                self._drawn = (state.last_seq, note)
            self._draw(update=True)

    def _close(self) -> None:
        self.closed = True
        self._note = CLOSED_NOTE
        if self._unwatch is not None:
            self._unwatch()
        self._throttle.cancel()

    def on_commit(self, facts: Sequence[Fact]) -> None:
        """Renders at once when a run starts or finishes or the session changed (no
        facts), else as the throttle lets it: the facts committed just before a long
        model call or tool are drawn while it runs, not after."""
        milestone = not facts or any(
            isinstance(f, RecordFact) and f.record.type in ("runStarted", "operationFinished")
            for f in facts
        )
        if milestone or self._throttle.due():
            self.refresh()


@dataclass
class Throttle:
    """At most one render every `interval` s from the last one's end (`rendered`); `due`
    inside it sets one trailing render (`late`) for its end on a daemon thread, so what
    came inside is drawn then, not only when something more arrives."""

    _interval: float
    _late: Callable[[], None]
    _clock: Callable[[], float]
    _last: float = field(default=float("-inf"), init=False)
    _timer: threading.Timer | None = field(default=None, init=False)

    def due(self) -> bool:
        waited = self._clock() - self._last
        if waited >= self._interval:
            return True
        if self._timer is None:
            self._timer = threading.Timer(self._interval - waited, self._fire)
            self._timer.daemon = True
            self._timer.start()
        return False

    def rendered(self) -> None:
        self._last = self._clock()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        try:
            self._late()
        except Exception:
            log.exception("a display failed to update")
