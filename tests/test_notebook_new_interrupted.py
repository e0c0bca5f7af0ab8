"""`%agent new` interrupted wherever the interrupt lands: afterwards either the old
conversation is still the current file, or it is kept under its archive name and a new
one is the current file; the kernel writes the file its status names, never the archive.

The interrupt is a real SIGINT (`signal.raise_signal`, so the handler installed at that
moment decides: Python's raises KeyboardInterrupt, a held one records it) raised at a
chosen call or return of the package's functions under `NotebookRuntime.new`, one
scenario per point."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import tiny_agent_nb
from tiny_agent_nb.notebook._config import TinyAgent
from tiny_agent_nb.notebook._links import SessionLocation
from tiny_agent_nb.notebook._runtime import NotebookRuntime
from tiny_agent_nb.session import load_session

PACKAGE = str(Path(tiny_agent_nb.__file__).parent)
DEPTH = 4  # calls below `new` (itself 1) where an interrupt is tried: deeper ones are
# inside a commit, a move or a close of the store, which hold SIGINT themselves


def interrupting(point: int, points: list[str]) -> Callable[[FrameType, str, Any], None]:
    """A profile function that raises SIGINT at the `point`-th call or return of the
    package's functions at most DEPTH deep, and lists every such point in `points`."""
    depth = 0

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal depth
        if event not in ("call", "return") or not frame.f_code.co_filename.startswith(PACKAGE):
            return
        depth += event == "call"
        if depth <= DEPTH:
            if len(points) == point:
                signal.raise_signal(signal.SIGINT)
            points.append(f"{event} {frame.f_code.co_name}")
        depth -= event == "return"

    return profile


def new_interrupted_at(root: Path, point: int) -> list[str]:
    root.mkdir()
    path = root / "analysis.agent.jsonl"
    archive = root / "analysis.agent.1.jsonl"
    runtime = NotebookRuntime(TinyAgent(), {})
    runtime.open(SessionLocation(path, "explicit"))
    old = load_session(path).header.id
    points: list[str] = []
    interrupted = False
    sys.setprofile(interrupting(point, points))
    try:
        _, report = runtime.new()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sys.setprofile(None)
    where = points[point] if point < len(points) else "nowhere"
    try:
        store = runtime.store
        assert store is not None and not store.closed, where
        assert store.path == path and store.moved() is None, where
        assert runtime.session_path() == path, where
        current = load_session(path).header.id  # a session, not an empty file
        assert store.load().header.id == current, where
        if archive.exists():
            assert load_session(archive).header.id == old, where
            assert current != old, where
            if point < len(points) and not interrupted:  # the switch went on past it
                assert any("was being switched" in note for note in report.notes), where
        else:
            assert current == old, where
            assert interrupted, where
    finally:
        runtime.close()
    return points


@pytest.mark.slow  # a session made and interrupted once per point of `new`
@pytest.mark.usefixtures("sigint_raises")  # Ctrl-C as a kernel takes it, wherever pytest runs
def test_an_interrupt_anywhere_in_new_leaves_one_current_file_and_the_kernel_writing_it(
    tmp_path: Path,
) -> None:
    points = new_interrupted_at(tmp_path / "whole", 10**6)  # no interrupt: the points
    assert "call _close_noting" in points and "return open" in points
    for point in range(len(points)):
        new_interrupted_at(tmp_path / str(point), point)
