"""schemas/session/*.schema.json are generated from the models and describe real files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

# jsonschema is imported by the tests that use it: its format checkers build a grammar
# at import (~0.8 s where rfc3987-syntax is installed, as Jupyter installs it), and every
# worker of a parallel run imports this module to collect it.
import pytest

from tiny_agent_nb.session._schema import session_schemas

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas" / "session"
FIXTURES = SCHEMAS / "fixtures"


@pytest.mark.parametrize("name", sorted(session_schemas()))
def test_committed_schema_matches_the_models(name: str) -> None:
    committed = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    assert committed == session_schemas()[name], (
        f"schemas/session/{name} is stale: run `python scripts/generate_schemas.py`"
    )


def _valid_fixture_lines() -> list[tuple[str, int, bytes]]:
    out = []
    for expected_path in sorted(FIXTURES.glob("*.expected.json")):
        if "summary" not in json.loads(expected_path.read_text()):
            continue
        name = expected_path.name.removesuffix(".expected.json")
        raw = (FIXTURES / f"{name}.jsonl").read_bytes()
        complete = raw[: raw.rfind(b"\n")].split(b"\n")
        out.extend((name, number, line) for number, line in enumerate(complete, start=1))
    return out


def _validator(name: str) -> Any:
    """A validator of the committed schema `name`, which resolves the others it refers
    to (the transaction schema's facts) by their $id."""
    import jsonschema  # noqa: PLC0415
    from referencing import Registry, Resource  # noqa: PLC0415

    schemas = [json.loads(p.read_text(encoding="utf-8")) for p in SCHEMAS.glob("*.schema.json")]
    registry: Registry[Any] = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in schemas
    )
    committed = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(committed, registry=registry)


def test_every_line_of_every_valid_fixture_matches_the_schemas() -> None:
    header = _validator("header.schema.json")
    transaction = _validator("transaction.schema.json")
    lines = _valid_fixture_lines()
    assert len(lines) > 100
    for name, number, line in lines:
        validator = header if number == 1 else transaction
        errors = list(validator.iter_errors(json.loads(line)))
        assert not errors, f"{name}.jsonl line {number}: {errors[0].message}"


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"kind":"gossip","seq":1}', "unknown kind"),
        ("[]", "empty transaction"),
        (
            '{"kind":"entry","seq":1,"id":"01a22960-953c-7ca6-a2a1-d8dc8ae0f710","at":1,'
            '"entry":{"type":"message","message":{"role":"user","content":"x"}},"extra":1}',
            "unknown field",
        ),
        (
            '{"kind":"entry","seq":1,"id":"01A22960-953C-7CA6-A2A1-D8DC8AE0F710","at":1,'
            '"entry":{"type":"message","message":{"role":"user","content":"x"}}}',
            "uppercase id",
        ),
    ],
)
def test_schema_rejects_malformed_transactions(line: str, why: str) -> None:
    assert not _validator("transaction.schema.json").is_valid(json.loads(line)), why


def test_the_format_names_every_record_and_its_members() -> None:
    # docs/session-format.md §2.3 restates the models for a reader in another language:
    # its table of records names the same types and members as the schema made from them.
    text = (ROOT / "docs" / "session-format.md").read_text(encoding="utf-8")
    table = text[text.index("### 2.3 Records") : text.index("### 2.4")]
    in_docs = {
        record_type: set(re.findall(r"`(\w+)`", members))
        for record_type, members in re.findall(
            r"^\| `(\w+)` \| (`.*?) \| ", table, flags=re.MULTILINE
        )
    }
    fact = json.loads((SCHEMAS / "fact.schema.json").read_text(encoding="utf-8"))
    records = fact["$defs"]["RecordFact"]["properties"]["record"]["discriminator"]["mapping"]
    in_schema = {
        record_type: set(fact["$defs"][ref.rsplit("/", 1)[1]]["properties"]) - {"type"}
        for record_type, ref in records.items()
    }
    assert in_docs == in_schema
