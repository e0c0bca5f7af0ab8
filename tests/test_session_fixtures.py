"""Every conformance fixture in schemas/session/fixtures loads exactly as its
NAME.expected.json says: the summary, or the error type and line."""

from __future__ import annotations

import importlib.util
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


def _payload_shapes(definitions: list[dict[str, Any]]) -> set[frozenset[str]]:
    """Each object's members; a member that holds one text (`type`, `role`, the header's
    `kind`) as `member=text`."""
    shapes = set()
    for definition in definitions:
        members = definition["properties"]
        shapes.add(
            frozenset(
                f"{name}={schema['const']}" if isinstance(schema.get("const"), str) else name
                for name, schema in members.items()
            )
        )
    return shapes


def test_the_generator_writes_every_member_the_schemas_name() -> None:
    # The generator is the format's oracle and imports nothing of the package; this keeps
    # its table of payloads and the schemas (made from the models) naming the same members.
    script = ROOT / "scripts" / "make_session_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_session_fixtures", script)
    assert spec is not None and spec.loader is not None
    oracle = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = oracle  # its dataclasses look their module up
    try:
        spec.loader.exec_module(oracle)
    finally:
        del sys.modules[spec.name]
    schemas = ROOT / "schemas" / "session"
    header = json.loads((schemas / "header.schema.json").read_text())
    definitions = json.loads((schemas / "fact.schema.json").read_text())["$defs"].values()
    # the fact envelopes (kind, seq, id, at) are written by the builder, not a table row
    payloads = [d for d in definitions if "properties" in d and "seq" not in d["properties"]]
    in_schemas = _payload_shapes([header, *payloads])
    in_generator = {frozenset(row) for row in oracle.PAYLOADS.values()}
    assert in_generator == in_schemas, (
        f"only the schemas: {sorted(map(sorted, in_schemas - in_generator))}; "
        f"only the generator: {sorted(map(sorted, in_generator - in_schemas))}"
    )
