"""A live timeline's trailing render runs on a timer thread while the run commits on the
kernel's thread: each order of the two, forced through a gate in what the view reads.

A commit tells the view while it holds the store's lock; the trailing render reads the
store. Reading under the view's own lock deadlocked the two (a kernel stalled mid-run in
the browser test: one streamed delta shown, the run open for good).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tiny_agent_nb.notebook import NotebookRuntime, TinyAgent, resolve_session_path
from tiny_agent_nb.notebook._timeline_view import REFRESH_INTERVAL, TimelineView
from tiny_agent_nb.session import Fact, SessionState

from helpers.scenario import Run

GATE_TIMEOUT = 10.0  # s; a healthy view passes the gate in milliseconds
PENDING = '<div class="tan-attempt" data-status="pending">'
SETTLED = '<div class="tan-attempt" data-status="settled">'


class GatedReads:
    """The kernel's agent as a view reads it, except for the read after `hold()`: that
    one stops at a gate until `gate.set()`, before reading the session (`read_first=
    False`) or with what it read in hand (`read_first=True`)."""

    def __init__(self, agent: NotebookRuntime) -> None:
        self.agent = agent
        self.at_gate = threading.Event()
        self.gate = threading.Event()
        self.reader: threading.Thread | None = None
        self._held: bool | None = None

    def hold(self, *, read_first: bool) -> None:
        self._held = read_first

    def read_state(self) -> tuple[SessionState, str | None]:
        read_first, self._held = self._held, None
        if read_first is None:
            return self.agent.read_state()
        self.reader = threading.current_thread()
        read = self.agent.read_state() if read_first else None
        self.at_gate.set()
        assert self.gate.wait(GATE_TIMEOUT), "the gate was never opened"
        return read or self.agent.read_state()

    def watch(self, watcher: Callable[[Sequence[Fact]], None]) -> Callable[[], None]:
        return self.agent.watch(watcher)


class Shown:
    """The display as a frontend keeps it: the latest bundle."""

    def __init__(self) -> None:
        self.html = ""

    def __call__(self, bundle: dict[str, str], *, display_id: str, update: bool) -> None:
        self.html = bundle["text/html"]


class Live:
    """A view following a real session file, its clock in the test's hands, one run
    started (drawn at once) and a step's attempt committed inside the throttle interval:
    its render is the trailing one, on a timer thread, which reads through the gate."""

    def __init__(self, tmp_path: Path, *, read_first: bool) -> None:
        self.agent = NotebookRuntime(TinyAgent(base_url="http://127.0.0.1:9/v1"), {})
        location = resolve_session_path(
            explicit="live.agent.jsonl", environ={}, user_ns={}, cwd=tmp_path
        )
        self.agent.open(location)
        self.store = self.agent.require_store()
        self.source = GatedReads(self.agent)
        self.now = 0.0
        self.shown = Shown()
        self.committer: threading.Thread | None = None
        self.before_view: Callable[[], None] | None = None  # hears commits first
        self.agent.watch(lambda facts: self.before_view() if self.before_view else None)
        self.view = TimelineView(self.source, live=True, publish=self.shown, clock=lambda: self.now)
        self.view.show()
        self.run = Run(environment=self.store.header.environmentIdentity)
        self.store.commit(self.run.start("Say hello with bash."))  # a milestone: drawn now
        self.source.hold(read_first=read_first)
        self.now = REFRESH_INTERVAL * 0.99  # inside the interval, so the timer fires soon
        self.store.commit(self.run.attempt())
        self.now = 10 * REFRESH_INTERVAL  # the next commit draws at once

    def commit_answer_in(self, thread_name: str) -> threading.Thread:
        """Commit the attempt's answer from a thread of its own, as the loop would next
        (a thread, so that a deadlock fails the test instead of hanging it)."""
        committer = threading.Thread(
            target=self.store.commit, args=(self.run.answer("Hello."),), name=thread_name
        )
        committer.daemon = True  # left behind only by a deadlock, which fails the test
        committer.start()
        self.committer = committer
        return committer

    def close(self) -> None:
        self.source.gate.set()
        threads = [t for t in (self.source.reader, self.committer) if t is not None]
        for thread in threads:
            thread.join(GATE_TIMEOUT)
        # A thread still blocked holds the store's lock: closing would block as well.
        if not any(t.is_alive() for t in threads):
            self.agent.close()


@pytest.fixture
def live_view(tmp_path: Path) -> Iterator[Callable[..., Live]]:
    made: list[Live] = []

    def make(*, read_first: bool) -> Live:
        made.append(Live(tmp_path, read_first=read_first))
        return made[-1]

    yield make
    for live in made:
        live.close()


def test_a_trailing_render_that_reads_while_a_commit_tells_the_view_does_not_deadlock(
    live_view: Callable[..., Live],
) -> None:
    """The CI stall: the timer's render waits for the store (a commit holds it) while
    the commit, telling the view, waits for the view. Both must go through, and the
    display end on the committed answer."""
    live = live_view(read_first=False)

    def let_the_trailing_render_read() -> None:  # inside the commit, with its lock held
        assert live.source.at_gate.wait(GATE_TIMEOUT), "the trailing render never read"
        live.source.gate.set()

    live.before_view = let_the_trailing_render_read
    committer = live.commit_answer_in("committer")
    committer.join(GATE_TIMEOUT)
    assert not committer.is_alive(), "the commit and the trailing render deadlocked"
    reader = live.source.reader
    assert reader is not None
    reader.join(GATE_TIMEOUT)
    assert not reader.is_alive(), "the trailing render never finished"
    assert SETTLED in live.shown.html and PENDING not in live.shown.html


def test_a_trailing_render_that_read_before_a_commit_does_not_draw_over_it(
    live_view: Callable[..., Live],
) -> None:
    """The timer's render read the session (attempt pending), then the answer was
    committed and drawn on the committing thread: the older read must not replace it."""
    live = live_view(read_first=True)
    assert live.source.at_gate.wait(GATE_TIMEOUT), "the trailing render never read"
    committer = live.commit_answer_in("committer")
    committer.join(GATE_TIMEOUT)
    assert not committer.is_alive(), "the commit waited for the trailing render"
    assert SETTLED in live.shown.html  # drawn by the commit, on its own thread
    live.source.gate.set()
    reader = live.source.reader
    assert reader is not None
    reader.join(GATE_TIMEOUT)
    assert not reader.is_alive(), "the trailing render never finished"
    assert SETTLED in live.shown.html and PENDING not in live.shown.html
