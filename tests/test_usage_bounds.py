"""Usage numbers past 2**53 - 1, from a server or from a session file anyone may have
written: no usage, never a crash, never `$inf` (docs/spec.md §4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.cli import main
from tiny_agent_nb.render import timeline_html, timeline_text
from tiny_agent_nb.session import load_session
from tiny_agent_nb.timeline import build_timeline

from helpers.ipython_shell import run_clean, shell
from helpers.openai_server import OpenAIServer, text_reply

__all__ = ["shell"]  # the fixture, from ipython_shell

FIXTURE = (
    Path(__file__).resolve().parent.parent / "schemas/session/fixtures/usage-out-of-range.jsonl"
)
HUGE = 9 * 10**4299  # 4,300 digits: still parsed; two of them sum past what str() prints


def _wire(prompt: int, completion: int, cost: float | None = None) -> dict[str, Any]:
    wire: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cost is not None:
        wire["cost"] = cost
    return wire


def _surfaces_survive(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Every CLI view of `path` exits 0; what they printed, together."""
    printed = []
    for command in ("usage", "timeline", "inspect"):
        for extra in ([], ["--json"]) if command != "timeline" else ([],):
            assert main([command, str(path), *extra]) == 0, (command, extra)
            out = capsys.readouterr()
            assert "Traceback" not in out.err
            printed.append(out.out)
    state = load_session(path)
    timeline = build_timeline(state)
    printed += [timeline_text(timeline), timeline_html(timeline)]
    return "\n".join(printed)


def test_a_session_file_with_huge_usage_loads_and_every_view_reads_it_as_no_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = load_session(FIXTURE)
    # the out-of-range facts stay in the file, and read as none: only run 3's usage counts
    assert len(state.usage) == 1
    totals = state.totals
    assert (totals.input_tokens, totals.output_tokens, totals.known_cost) == (20, 3, 2e-05)
    assert all(u.cost is not None and u.cost < 1 for u in state.usage.values())
    shown = _surfaces_survive(FIXTURE, capsys)
    assert "inf" not in shown.replace("info", "")
    assert "9999999999" not in shown
    assert "at least $0.00002" in shown  # two answers of unknown cost, one priced


def test_huge_counts_from_the_server_leave_every_notebook_and_cli_view_working(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.enqueue(
        text_reply("One.", usage=_wire(HUGE, HUGE, cost=1e308)),
        text_reply("Two.", usage=_wire(HUGE, HUGE, cost=1e308)),
    )
    run_clean(shell, "%load_ext tiny_agent_nb", capsys)
    assert "One." in run_clean(shell, "%%agent\nCount", capsys)
    assert "Two." in run_clean(shell, "%%agent\nCount again", capsys)
    shown = "".join(
        run_clean(shell, line, capsys)
        for line in ("%agent usage", "%agent status", "%agent timeline")
    )
    assert "usage unknown" in shown and "cost unknown" in shown
    assert "inf" not in shown.replace("info", "")
    path = tmp_path / "analysis.agent.jsonl"
    assert load_session(path).usage == {}  # never written: a report past the bound is none
    _surfaces_survive(path, capsys)
