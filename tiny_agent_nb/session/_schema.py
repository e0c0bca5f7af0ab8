"""JSON Schemas of the file format, generated from the pydantic models.

`schemas/session/*.schema.json` are these, committed; a test fails when they drift.
Regenerate with `python scripts/generate_schemas.py`. The transaction schema refers to
the fact schema rather than repeating it, so a new kind of fact changes one file.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from ._models import FACT_ADAPTER, HEADER_ADAPTER

_BASE = "https://github.com/tiny-agent-nb/tiny-agent-nb/schemas/session/"
_FACT = {"$ref": "fact.schema.json"}  # resolved against the transaction schema's $id


class _LineSchema(GenerateJsonSchema):
    """A payload's `type` that names it alone (a record's, a compaction's, a kernel
    notice's) has its one value as a default, so that the payload model is its own
    constructor (`AbortRequested(operationId=..., reason=...)`); a line must still
    name it, so the schema keeps it required and without a default."""

    def field_is_required(
        self,
        field: Any,  # pydantic_core's field schemas: a TypedDict, read by its keys
        total: bool,
    ) -> bool:
        return _is_tag(field["schema"]) or super().field_is_required(field, total)

    def default_schema(self, schema: Any) -> JsonSchemaValue:
        if _is_tag(schema):
            return self.generate_inner(schema["schema"])
        return super().default_schema(schema)


def _is_tag(schema: Any) -> bool:
    return schema["type"] == "default" and bool(schema["schema"]["type"] == "literal")


def _decorate(name: str, title: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": _BASE + name,
        "title": title,
        "description": description,
        **{key: value for key, value in schema.items() if key not in ("title", "description")},
    }


def session_schemas() -> dict[str, dict[str, Any]]:
    """File name -> schema, for header, fact and transaction (format version 2)."""
    return {
        "header.schema.json": _decorate(
            "header.schema.json",
            "tiny-agent-nb session header (v2)",
            "Line 1 of a session file, and only line 1.",
            HEADER_ADAPTER.json_schema(schema_generator=_LineSchema),
        ),
        "fact.schema.json": _decorate(
            "fact.schema.json",
            "tiny-agent-nb session fact (v2)",
            "One entry, record or usage fact. Cross-fact invariants (seq, unique ids, "
            "references) are not expressible here; see docs/session-format.md §4.",
            FACT_ADAPTER.json_schema(schema_generator=_LineSchema),
        ),
        "transaction.schema.json": _decorate(
            "transaction.schema.json",
            "tiny-agent-nb session transaction (v2)",
            "Every line after the header: one fact, or a non-empty array of facts "
            "applied atomically.",
            {"anyOf": [_FACT, {"items": _FACT, "minItems": 1, "type": "array"}]},
        ),
    }
