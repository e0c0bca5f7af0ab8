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


_RACE = """
import importlib.machinery, json, sys, threading, time, types
from tiny_agent_nb.mcp._jsonschema import import_jsonschema

assert "rfc3987_syntax" not in sys.modules and "jsonschema" not in sys.modules
checking, inserted = threading.Event(), threading.Event()
seen = []


def stand_in_shows(seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if type(sys.modules.get("rfc3987_syntax")) not in (types.ModuleType, type(None)):
            return
        time.sleep(0.01)


class Held:
    # The user's import of the real module, held where sys.modules holds it half made.
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        checking.wait(10)  # the first start has found sys.modules without it
        return None

    def exec_module(self, module):
        inserted.set()
        stand_in_shows(3)  # the first start may put its stand-in over this module now
        self.loader.exec_module(module)


class Gate:
    # Never blocks under the import system's global lock for long: only the first
    # start's lookup, between its check of sys.modules and what it does next.
    def find_spec(self, name, path=None, target=None):
        if name != "rfc3987_syntax":
            return None
        if threading.current_thread().name == "user":
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            spec.loader = Held(spec.loader)
            return spec
        checking.set()
        inserted.wait(3)
        return None


def user():
    try:
        import rfc3987_syntax
        seen.append(rfc3987_syntax.is_valid_syntax("iri", "http://[bad"))
    except Exception as exc:
        seen.append(f"{type(exc).__name__}: {exc}")


sys.meta_path.insert(0, Gate())
other = threading.Thread(target=user, name="user")
other.start()
first = threading.Thread(target=import_jsonschema, name="first-start")
first.start()
first.join(60)
other.join(60)
from jsonschema import FormatChecker
print(json.dumps({"user": seen, "iri": FormatChecker().conforms("http://[bad", "iri")}))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("rfc3987_syntax") is None,
    reason="rfc3987-syntax is not installed: no stand-in is made",
)
def test_the_stand_in_never_replaces_an_rfc3987_syntax_another_thread_is_importing() -> None:
    """A thread imports rfc3987_syntax (held while half made) as the first start
    imports jsonschema: the stand-in put over the half-made real module broke that
    module's own imports ('rfc3987_syntax' is not a package); with the import locks held
    the first start waits, and the user's module and jsonschema's checkers are real."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", _RACE],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"user": [False], "iri": False}
