"""Every conformance fixture in schemas/session/fixtures loads exactly as its
NAME.expected.json says: the summary, or the error type and line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.session import NotASessionError, SessionCorruptError, load_session

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "schemas" / "session" / "fixtures"
NAMES = sorted(p.name.removesuffix(".jsonl") for p in FIXTURES.glob("*.jsonl"))


def test_there_are_fixtures_for_every_failure_class() -> None:
    assert len(NAMES) >= 20
    expected = [json.loads((FIXTURES / f"{n}.expected.json").read_text()) for n in NAMES]
    assert sum("summary" in e for e in expected) >= 10
    assert sum(e.get("error", {}).get("type") == "SessionCorruptError" for e in expected) >= 15


@pytest.mark.parametrize("name", NAMES)
def test_fixture(name: str) -> None:
    path = FIXTURES / f"{name}.jsonl"
    before = path.read_bytes()
    expected: dict[str, Any] = json.loads((FIXTURES / f"{name}.expected.json").read_text())
    if "summary" in expected:
        assert load_session(path).summary() == expected["summary"]
    elif expected["error"]["type"] == "SessionCorruptError":
        with pytest.raises(SessionCorruptError) as info:
            load_session(path)
        assert info.value.line == expected["error"]["line"], info.value.reason
        assert str(path) in str(info.value) and f"line {info.value.line}" in str(info.value)
    else:
        assert expected["error"]["type"] == "NotASessionError"
        with pytest.raises(NotASessionError):
            load_session(path)
    assert path.read_bytes() == before


# The format's worked examples, kept in the repository as fixtures (the generator rebuilds
# them byte for byte from their ids), so this suite needs nothing outside the checkout.
WORKED_EXAMPLES = ("completed-run", "killed-during-bash", "killed-during-bash-recovered")


@pytest.mark.parametrize("name", WORKED_EXAMPLES)
def test_design_worked_examples_are_fixtures_with_summaries(name: str) -> None:
    expected = json.loads((FIXTURES / f"{name}.expected.json").read_text())
    assert load_session(FIXTURES / f"{name}.jsonl").summary() == expected["summary"]


def test_fixtures_are_what_the_generator_writes() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_session_fixtures.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
