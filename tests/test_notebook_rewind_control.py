"""The timeline's "Rewind to before this run" control (notebook/_rewind_control.py): each
run row's HTML carries its command (what a reopened notebook shows), and in a live
frontend the timeline's widget turns it into a button whose message calls the hook with
that run's number, only for a run on screen and never while a run is open."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import pytest

from tiny_agent_nb.notebook import NotebookError
from tiny_agent_nb.notebook._rewind_control import (
    RUN_OPEN,
    RewindControl,
)
from tiny_agent_nb.notebook._timeline_view import CLOSED_NOTE, TimelineView
from tiny_agent_nb.render import timeline_html, timeline_text
from tiny_agent_nb.session import SessionStore
from tiny_agent_nb.timeline import Timeline, build_timeline

from helpers.scenario import Run

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TAG = "<img src=x onerror=alert(1)>"


def _timeline(store: SessionStore, runs: int = 3, *, open_last: bool = False) -> Timeline:
    for n in range(runs):
        run = Run(environment=store.header.environmentIdentity)
        store.commit(run.start(f"prompt {n} {TAG} %agent rewind 9"))
        if n < runs - 1 or not open_last:
            store.commit(run.finish())
    return build_timeline(store.load())


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hints: list[tuple[str | None, str | None]] = []  # (tag, data-run)
        self.tags: set[str] = set()
        self._in_hint = False
        self.hint_text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if ("class", "tan-rewind") in attrs:
            self.hints.append((tag, dict(attrs).get("data-run")))
            self._in_hint = True

    def handle_endtag(self, tag: str) -> None:
        self._in_hint = False

    def handle_data(self, data: str) -> None:
        if self._in_hint:
            self.hint_text.append(data)


def test_each_run_row_says_its_rewind_command_and_a_rewind_row_none(
    store: SessionStore,
) -> None:
    t = _timeline(store)
    kinds = ("run", "resume", "rewind")  # `rewind`: the rows rewinds add
    t = dataclasses.replace(
        t, runs=tuple(dataclasses.replace(r, kind=k) for r, k in zip(t.runs, kinds, strict=True))
    )
    page = _Page()
    page.feed(timeline_html(t))
    page.close()
    assert page.hints == [("code", "1"), ("code", "2")]
    assert page.hint_text == ["↶ %agent rewind 1", "↶ %agent rewind 2"]
    # The prompt's own text stays text: no element of it, no hint of the model's.
    assert page.tags <= {"style", "div", "b", "br", "span", "details", "summary", "code", "pre"}
    assert "img" not in page.tags
    # The text view (a terminal, the CLI, where the command is another) has no hint.
    assert "%agent rewind 1" not in timeline_text(t)


class _Shown:
    """What a frontend keeps of the published displays, by display id."""

    def __init__(self) -> None:
        self.outputs: dict[str, dict[str, Any]] = {}

    def __call__(self, bundle: dict[str, Any], *, display_id: str, update: bool) -> None:
        assert update == (display_id in self.outputs)
        self.outputs[display_id] = bundle


def _control(
    hook: Callable[[int], None], shown: _Shown
) -> tuple[RewindControl, list[Callable[[], None]]]:
    scheduled: list[Callable[[], None]] = []
    return RewindControl(hook, scheduled.append, shown), scheduled


def _click(control: RewindControl, content: Any) -> None:
    """The widget's message, as the frontend's click sends it (through ipywidgets)."""
    control.widget._handle_custom_msg(content, [])


def test_a_click_calls_the_hook_with_its_run_on_the_main_thread_later(
    store: SessionStore,
) -> None:
    called: list[int] = []
    shown = _Shown()
    control, scheduled = _control(called.append, shown)
    t = _timeline(store)
    control.draw({"text/plain": timeline_text(t), "text/html": timeline_html(t)}, t)
    record, widget = shown.outputs.values()
    assert 'class="tan-control-record' in record["text/html"]
    assert 'class="tan-rewind" data-run="3"' in record["text/html"]
    assert WIDGET_VIEW in widget
    assert control.widget.html == timeline_html(t)

    _click(control, {"rewind": 2})
    assert called == []  # not on the thread that handled the click
    for work in scheduled:
        work()
    assert called == [2]


@pytest.mark.parametrize(
    "content",
    [
        {"rewind": 4},  # no such run on screen
        {"rewind": 0},
        {"rewind": "2"},
        {"rewind": 2.0},
        {"rewind": True},
        {"rewind": [2]},
        {"rewind": 2, "force": True},
        {"run": 2},
        [2],
        "rewind 2",
    ],
)
def test_a_forged_message_does_nothing(store: SessionStore, content: Any) -> None:
    control, scheduled = _control(lambda run: pytest.fail(f"called with {run}"), _Shown())
    t = _timeline(store)
    control.draw({"text/plain": "", "text/html": timeline_html(t)}, t)
    _click(control, content)
    assert scheduled == []
    assert control.widget.said == ""


def test_a_click_while_a_run_is_open_is_answered_in_the_widget_and_does_nothing(
    store: SessionStore,
) -> None:
    control, scheduled = _control(lambda run: pytest.fail(f"called with {run}"), _Shown())
    t = _timeline(store, open_last=True)
    control.draw({"text/plain": "", "text/html": timeline_html(t)}, t)
    _click(control, {"rewind": 1})
    assert scheduled == []
    assert control.widget.said == RUN_OPEN
    # The run ends: the answer goes with it.
    ended = dataclasses.replace(t, runs=t.runs[:-1])
    control.draw({"text/plain": "", "text/html": timeline_html(ended)}, ended)
    assert control.widget.said == ""


class _Source:
    def __init__(self, store: SessionStore) -> None:
        self.store: SessionStore | None = store

    def read_state(self) -> Any:
        if self.store is None:
            raise NotebookError("closed")
        return self.store.load(), None

    def watch(self, watcher: Any) -> Callable[[], None]:
        return lambda: None


def test_the_view_draws_its_record_and_widget_and_leaves_the_record_when_closed(
    store: SessionStore,
) -> None:
    _timeline(store, runs=1)
    shown = _Shown()
    control, _ = _control(lambda run: None, shown)
    source = _Source(store)
    view = TimelineView(source, live=True, publish=shown, rewind=control)
    view.show()
    assert len(shown.outputs) == 2
    _timeline(store, runs=1)
    view.refresh()
    record, widget = shown.outputs.values()
    assert record["text/html"].count('class="tan-rewind"') == 2
    assert control.widget.html.count('class="tan-rewind"') == 2

    source.store = None  # the session closed in this kernel
    view.refresh()
    record, widget = shown.outputs.values()
    assert CLOSED_NOTE in record["text/plain"]
    assert WIDGET_VIEW not in widget  # the widget went; the record stays
    _click(control, {"rewind": 1})
    assert control.widget.said == ""
