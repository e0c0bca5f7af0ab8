"""What the first start of MCP servers costs a kernel: the offer checks each tool's input
schema with jsonschema, whose import would build an RFC 3987 grammar (Lark) for two
formats nothing here checks; the grammar waits for its first use, and that use answers
as the real module does (docs/benchmarks.md, row "jsonschema-grammar")."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

_FIRST_START = """
import json, sys
from mcp_helpers import stdio_entry
from tiny_agent_nb.mcp import McpServers, parse_config

servers = McpServers(parse_config({"mcpServers": {"t": stdio_entry("--bad-schema")}}))
try:
    lines = servers.start()
    offered = [tool.name for tool in servers.tools()]
finally:
    servers.close()
grammar = [name for name in ("rfc3987_syntax", "lark") if name in sys.modules]
from jsonschema import Draft202012Validator, FormatChecker

iri = [
    checker.conforms(value, kind)
    for checker in (Draft202012Validator.FORMAT_CHECKER, FormatChecker())
    for value, kind in (("http://[bad", "iri"), ("http://example.com/\\u00e4", "iri"),
                        ("//[bad", "iri-reference"), ("a/\\u00e4#x", "iri-reference"))
]
real = type(sys.modules["rfc3987_syntax"]).__name__
print(json.dumps({"lines": lines, "offered": offered, "grammar": grammar, "iri": iri,
                  "real": real}))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("rfc3987_syntax") is None,
    reason="rfc3987-syntax is not installed: jsonschema's import builds no grammar here",
)
def test_the_first_start_in_a_fresh_process_builds_no_rfc3987_grammar() -> None:
    paths = [str(TESTS), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_START],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    # The schemas were checked: the test server's invalid one was refused, the rest offered.
    (refused,) = seen["lines"]
    assert "MCP tool 'odd' of server t is not offered" in refused
    assert "t__echo" in seen["offered"] and "t__odd" not in seen["offered"]
    assert seen["grammar"] == []
    # The iri formats still check, with the real module, for every user of jsonschema.
    assert seen["iri"] == [False, True, False, True] * 2
    assert seen["real"] == "module"


_BROKEN_GRAMMAR = """
import json, sys
from jsonschema_first import stand_in
if stand_in:
    from tiny_agent_nb.mcp._jsonschema import import_jsonschema
    import_jsonschema()
from jsonschema import Draft202012Validator, FormatChecker
answers = []
for checker in (Draft202012Validator.FORMAT_CHECKER, FormatChecker()):
    for value in ("http://[bad", "http://example.com/"):
        try:
            answers.append(checker.conforms(value, "iri"))
        except Exception as exc:
            answers.append(type(exc).__name__)
print(json.dumps(answers))
"""


@pytest.mark.parametrize("stand_in", [False, True])
def test_an_rfc3987_syntax_that_fails_to_import_leaves_iri_unchecked_as_jsonschema_does(
    tmp_path: Path, stand_in: bool
) -> None:
    """An installed rfc3987_syntax whose import fails (its Lark missing or broken): with
    jsonschema alone the iri formats go unchecked (its import suppresses the ImportError),
    and the stand-in's deferred import must not turn every iri check into that error."""
    broken = tmp_path / "rfc3987_syntax"
    broken.mkdir()
    (broken / "__init__.py").write_text("import lark_that_is_not_installed\n")
    (tmp_path / "jsonschema_first.py").write_text(f"stand_in = {stand_in}\n")
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    out = subprocess.run(
        [sys.executable, "-c", _BROKEN_GRAMMAR],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True] * 4
