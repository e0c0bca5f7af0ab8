"""Kernel boundaries in the timeline (docs/spec.md §9): the timeline's HTML, the terminal
text, `tiny-agent-nb timeline --json` and `inspect` show which kernel wrote which runs,
and what the model was told when it changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiny_agent_nb.cli import main
from tiny_agent_nb.render import timeline_html, timeline_text
from tiny_agent_nb.session import HeaderInit, SessionStore, load_session
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.timeline import build_timeline

from helpers.scenario import complete_run

HOSTILE_HOST = "<img src=x onerror=alert(1)>\x1b[2J"
NOTICE = "[Kernel restarted] The notebook's kernel restarted: ... <b>gone</b>."


def _kernel(store: SessionStore, pid: int, host: str = "laptop") -> str:
    opened = f.NewFact(
        f.KernelOpened(
            pid=pid, host=host, startedAt=1_787_000_000_000 + pid, kernelId="k1", notebook="a.ipynb"
        )
    )
    return store.commit([opened])[0].id


@pytest.fixture
def session(tmp_path: Path) -> Path:
    """Kernel 1 runs twice (reopening in between, the same process); kernel 2 (told) runs
    once; kernels 3 and 4 open with no run between; kernel 5 opens and has run nothing."""
    path = tmp_path / "a.agent.jsonl"
    init = HeaderInit(cwd="/w", provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        _kernel(store, 100)
        complete_run(store, "one")
        _kernel(store, 100)
        complete_run(store, "two")
        second = _kernel(store, 200, HOSTILE_HOST)
        store.commit([f.kernel_notice(second, NOTICE)])
        complete_run(store, "three")
        _kernel(store, 300)
        _kernel(store, 400)
        complete_run(store, "four")
        _kernel(store, 500)
    return path


def test_each_change_of_kernel_is_a_boundary_before_the_first_run_it_wrote(
    session: Path,
) -> None:
    t = build_timeline(load_session(session))
    boundaries = [(run.prompt, run.kernel.number if run.kernel else None) for run in t.runs]
    assert boundaries == [("one", 1), ("two", None), ("three", 2), ("four", 4)]
    assert t.runs[2].kernel is not None and t.runs[2].kernel.notice == NOTICE
    assert t.runs[3].kernel is not None and t.runs[3].kernel.pid == 400  # 300 wrote nothing
    assert t.kernel is not None and (t.kernel.number, t.kernel.pid) == (5, 500)


def test_the_html_shows_the_boundaries_and_escapes_what_the_file_says(session: Path) -> None:
    page = timeline_html(build_timeline(load_session(session)))
    assert page.count('class="tan-kernel"') == 4
    assert 'data-kernel="2"' in page and "pid 200 on" in page
    assert "<img" not in page and "&lt;img src=x" in page
    assert "<b>gone</b>" not in page and "&lt;b&gt;gone&lt;/b&gt;" in page
    assert "the model was told it restarted" in page
    # Boundaries stand before the run they start: kernel 2's before run three.
    assert page.index('data-kernel="2"') < page.index("three") < page.index('data-kernel="4"')


def test_the_text_shows_the_boundaries_printable(session: Path) -> None:
    text = timeline_text(build_timeline(load_session(session)))
    lines = text.splitlines()
    assert any(line.startswith("── ⟳ kernel 1 · a.ipynb · pid 100 on laptop") for line in lines)
    assert "\x1b" not in text and "\\x1b[2J" in text
    assert "the model was told it restarted: [Kernel restarted]" in text
    assert lines[-1].startswith("── ⟳ kernel 5 ")


def test_the_cli_lists_the_kernels(session: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["timeline", str(session), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["timeline"]["runs"]
    assert [run["kernel"]["number"] if run["kernel"] else None for run in runs] == [1, None, 2, 4]
    assert runs[2]["kernel"]["notice"] == NOTICE
    assert main(["inspect", str(session)]) == 0
    report = capsys.readouterr().out
    assert "kernels      6" in report and report.count("(the model was told it restarted)") == 1
    assert "\x1b" not in report


def test_a_session_written_before_kernels_were_recorded_shows_none(tmp_path: Path) -> None:
    path = tmp_path / "old.agent.jsonl"
    init = HeaderInit(cwd="/w", provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        complete_run(store, "one")
    t = build_timeline(load_session(path))
    assert [run.kernel for run in t.runs] == [None] and t.kernel is None
    assert "kernel" not in timeline_text(t)
