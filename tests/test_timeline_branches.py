"""The timeline shows a rewind's branches (docs/spec.md §17): the runs a rewind took off
the conversation's path say which rewind did, muted; the first run after a rewind says
the run it continues from; `%agent status` and `inspect` say the session's rewinds."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_agent_rewind import files, rewind, run_writing

from tiny_agent_nb.render import timeline_html, timeline_text
from tiny_agent_nb.session import FileStore, SessionStore
from tiny_agent_nb.timeline import build_timeline, rewinds_text

from helpers.cli_helpers import cli

__all__ = ["files"]  # the fixture, from test_agent_rewind


def test_runs_off_the_path_and_a_branch_are_shown(
    store: SessionStore,
    files: FileStore,
    tmp_path: Path,
    session_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    for name in ("a", "b", "c"):
        run_writing(store, files, root, {name: b"x"})
    rewind(store, files, root, 2)  # run 4: runs 2 and 3 leave the conversation
    run_writing(store, files, root, {"d": b"y"})  # run 5 continues from run 1
    state = store.load()
    rows = {run.number: run for run in build_timeline(state).runs}
    assert [rows[n].rewound_by for n in range(1, 6)] == [None, 4, 4, None, None]
    assert [rows[n].follows for n in range(1, 6)] == [None, None, None, None, 1]
    text = timeline_text(build_timeline(state))
    assert "change b · rewound by run 4" in text
    assert "change d · ↳ continues from run 1" in text
    html = timeline_html(build_timeline(state))
    assert html.count('data-rewound="4"') == 2
    assert '<span class="tan-muted"> · rewound by run 4</span>' in html
    words = "1 (the last, run 4, went back to before run 2); runs 2, 3 left the conversation"
    assert rewinds_text(state) == words
    assert cli(capsys, "inspect", str(session_path))[1].count(f"rewinds      {words}\n") == 1

    rewind(store, files, root, None)  # run 6 undoes run 4: 2 and 3 come back, 5 leaves
    state = store.load()
    rows = {run.number: run for run in build_timeline(state).runs}
    assert [rows[n].rewound_by for n in range(1, 7)] == [None, None, None, None, 6, None]
    assert rewinds_text(state) == (
        "2 (the last, run 6, went back to before run 4); run 5 left the conversation"
    )
