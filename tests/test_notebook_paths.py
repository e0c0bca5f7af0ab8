"""Which session file a notebook gets (the order README.md gives)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.notebook._links import resolve_session_path
from tiny_agent_nb.session import next_archive_path


@pytest.mark.parametrize(
    ("explicit", "environ", "user_ns", "expected", "source"),
    [
        ("mine.jsonl", {"JPY_SESSION_NAME": "/nb/a.ipynb"}, {}, "CWD/mine.jsonl", "explicit"),
        (
            None,
            {"JPY_SESSION_NAME": "/nb/analysis.ipynb"},
            {},
            "/nb/analysis.agent.jsonl",
            "JPY_SESSION_NAME",
        ),
        (
            None,
            {"JPY_SESSION_NAME": "sub/analysis.ipynb"},
            {},
            "CWD/analysis.agent.jsonl",
            "JPY_SESSION_NAME",
        ),
        (None, {"JPY_SESSION_NAME": "2b6e-console-uuid"}, {}, "CWD/agent-session.jsonl", "default"),
        (
            None,
            {},
            {"__vsc_ipynb_file__": "/code/report.ipynb"},
            "/code/report.agent.jsonl",
            "__vsc_ipynb_file__",
        ),
        (
            None,
            {"JPY_SESSION_NAME": "/nb/first.ipynb"},
            {"__vsc_ipynb_file__": "/code/second.ipynb"},
            "/nb/first.agent.jsonl",
            "JPY_SESSION_NAME",
        ),
        (None, {}, {}, "CWD/agent-session.jsonl", "default"),
    ],
)
def test_resolution_order(
    tmp_path: Path,
    explicit: str | None,
    environ: dict[str, str],
    user_ns: dict[str, str],
    expected: str,
    source: str,
) -> None:
    location = resolve_session_path(
        explicit=explicit, environ=environ, user_ns=user_ns, cwd=tmp_path
    )
    assert location.path == Path(expected.replace("CWD", str(tmp_path)))
    assert location.source == source


def test_archive_names_take_the_next_free_number(tmp_path: Path) -> None:
    current = tmp_path / "analysis.agent.jsonl"
    assert next_archive_path(current) == tmp_path / "analysis.agent.1.jsonl"
    (tmp_path / "analysis.agent.1.jsonl").write_text("")
    (tmp_path / "analysis.agent.2.jsonl").write_text("")
    assert next_archive_path(current) == tmp_path / "analysis.agent.3.jsonl"


def test_a_notebook_name_the_user_rebound_to_an_object_runs_none_of_its_code(
    tmp_path: Path,
) -> None:
    calls: list[str] = []

    class Cloak:
        @property  # type: ignore[misc]
        def __class__(self) -> Any:  # type: ignore[override]  # what isinstance falls back on
            calls.append("__class__")
            return str

    location = resolve_session_path(
        explicit=None, environ={}, user_ns={"__vsc_ipynb_file__": Cloak()}, cwd=tmp_path
    )
    assert location.source == "default"
    assert calls == []
