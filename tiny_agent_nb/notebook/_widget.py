"""The live timeline widget: runs → attempts → tool intents → usage.

It only reads: it subscribes to the store and re-renders (throttled) as facts commit.
Its mimebundle also carries static HTML and plain text, so nbconvert, GitHub and
terminal IPython show the same timeline without a widget frontend.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets

from ..render import timeline_html, timeline_text
from ..session import Fact, RecordFact, SessionError, SessionState
from ..timeline import Timeline, build_timeline

REFRESH_INTERVAL = 0.25  # seconds between two renders while facts stream in


class TimelineWidget(widgets.VBox):
    def __init__(
        self,
        load_state: Callable[[], SessionState],
        *,
        scripted: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load_state = load_state
        self._scripted = scripted
        self._clock = clock
        self._page: int | None = None  # None: follow the last page
        self._last_render = float("-inf")
        self._timeline: Timeline | None = None
        self._render_lock = threading.Lock()
        self._trailing: threading.Timer | None = None
        self._html = widgets.HTML()
        self._prev = widgets.Button(description="◀ older", layout=widgets.Layout(width="auto"))
        self._next = widgets.Button(description="newer ▶", layout=widgets.Layout(width="auto"))
        self._label = widgets.Label()
        self._prev.on_click(lambda _: self._turn(-1))
        self._next.on_click(lambda _: self._turn(+1))
        self._pager = widgets.HBox([self._prev, self._label, self._next])
        super().__init__([self._html, self._pager])
        self.add_class("tan-timeline-widget")
        self.refresh()

    @property
    def timeline(self) -> Timeline:
        assert self._timeline is not None
        return self._timeline

    def refresh(self) -> None:
        with self._render_lock:
            self._render()

    def _render(self) -> None:
        timeline = build_timeline(self._load_state(), page=self._page)
        self._timeline = timeline
        self._html.value = timeline_html(timeline, scripted=self._scripted)
        self._label.value = f"page {timeline.page + 1} of {timeline.pages}"
        self._pager.layout.display = "flex" if timeline.pages > 1 else "none"
        self._prev.disabled = timeline.page == 0
        self._next.disabled = timeline.page >= timeline.pages - 1
        self._last_render = self._clock()

    def on_commit(self, facts: Sequence[Fact]) -> None:
        """Store subscriber. Renders at once when a run starts or finishes or when the
        last render is older than REFRESH_INTERVAL; otherwise once more when the interval
        is over, so the facts committed just before a long model call or tool are drawn
        while it runs, not after."""
        milestone = any(
            isinstance(f, RecordFact) and f.record.type in ("runStarted", "operationFinished")
            for f in facts
        )
        waited = self._clock() - self._last_render
        if milestone or waited >= REFRESH_INTERVAL:
            self.refresh()
        elif self._trailing is None:
            self._trailing = threading.Timer(REFRESH_INTERVAL - waited, self._render_late)
            self._trailing.daemon = True
            self._trailing.start()

    def _render_late(self) -> None:
        self._trailing = None
        # The session may have been closed or switched meanwhile: nothing left to draw.
        with contextlib.suppress(SessionError):
            self.refresh()

    def _turn(self, delta: int) -> None:
        current = self.timeline.page
        target = current + delta
        self._page = None if target >= self.timeline.pages - 1 else max(0, target)
        self.refresh()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle: dict[str, Any] = super()._repr_mimebundle_(**kwargs) or {}
        bundle["text/html"] = self._html.value
        bundle["text/plain"] = timeline_text(self.timeline, scripted=self._scripted)
        return bundle
