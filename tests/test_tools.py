"""The tool protocol as the agent loop uses it: registry, schemas, effective arguments,
identities, output truncation."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

# jsonschema is imported by the tests that use it: its format checkers build a grammar
# at import (~0.8 s where rfc3987-syntax is installed, as Jupyter installs it), and every
# worker of a parallel run imports this module to collect it.
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiny_agent_nb.tools import (
    ReadFile,
    ToolArgumentError,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    builtin_registry,
    truncate,
)
from tiny_agent_nb.tools._limits import CappedOutput

BUILTINS = (
    "bash",
    "delete_cell",
    "edit_cell",
    "edit_file",
    "grep",
    "insert_cell",
    "list_files",
    "list_variables",
    "propose_cell",
    "python",
    "read_file",
    "read_notebook",
    "write_file",
)
SAFE_READS = {"grep", "list_files", "read_file"}
# Asked for under `--approve ask`: what may change something. list_variables and
# read_notebook read, and propose_cell's cell and a cell tool's diff are themselves reviewed
# (the diff whatever `--approve` says), though none is replayed after a crash.
ASKED = {"bash", "edit_file", "python", "write_file"}


# ---------------------------------------------------------------- registry


def test_builtin_registry_holds_every_builtin_tool() -> None:
    registry = builtin_registry()
    assert registry.names == BUILTINS
    assert len(registry) == len(BUILTINS)
    assert [tool.name for tool in registry] == list(BUILTINS)
    assert "bash" in registry
    assert registry.get("nope") is None


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_identity_and_replay_policy(name: str) -> None:
    tool = builtin_registry().get(name)
    assert tool is not None
    assert tool.identity.model_dump() == {"name": name, "version": "1", "source": "builtin"}
    assert tool.replay_policy == ("safeRead" if name in SAFE_READS else "never")
    assert tool.asks_approval == (name in ASKED)


def test_schemas_are_sorted_whatever_the_registration_order() -> None:
    forward = ToolRegistry(builtin_registry())
    backward = ToolRegistry(reversed(list(builtin_registry())))
    assert [s.name for s in backward.schemas()] == list(BUILTINS)
    assert forward.schemas() == backward.schemas()


def test_subset_keeps_the_named_tools() -> None:
    subset = builtin_registry().subset(["read_file", "grep", "read_file"])
    assert subset.names == ("grep", "read_file")
    assert builtin_registry().subset([]).names == ()


def test_subset_with_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown tool") as raised:
        builtin_registry().subset(["read_file", "rm_rf"])
    assert "rm_rf" in str(raised.value)
    assert "known tools: bash, delete_cell, edit_cell, edit_file, grep" in str(raised.value)


class Remote(ReadFile):
    """A tool named as an MCP server's tools are (`<server>__<tool>`)."""

    def __init__(self, name: str) -> None:
        self.name = name  # type: ignore[misc]
        self.source = f"mcp:{name.partition('__')[0]}"  # type: ignore[misc]


def _remote_registry() -> ToolRegistry:
    names = ["github__list_issues", "github__create_issue", "gitlab__list", "a[b]__x", "a?__y"]
    return ToolRegistry([*builtin_registry(), *(Remote(n) for n in names)])


def test_subset_takes_a_servers_tools_by_a_name_ending_in_a_star() -> None:
    subset = _remote_registry().subset(["github__*", "read_file"])
    assert subset.names == ("github__create_issue", "github__list_issues", "read_file")
    assert _remote_registry().subset(["git*", "github__*"]).names == (
        "github__create_issue",
        "github__list_issues",
        "gitlab__list",
    )


def test_subset_patterns_are_prefixes_not_globs() -> None:
    # As globs, `a[b]*` would match nothing here and `a?*` both a[b]__x and a?__y.
    assert _remote_registry().subset(["a[b]*"]).names == ("a[b]__x",)
    assert _remote_registry().subset(["a?*"]).names == ("a?__y",)
    with pytest.raises(ValueError, match="unknown tool"):
        _remote_registry().subset(["github__list_issue?"])  # no `?` wildcard


def test_subset_with_a_pattern_matching_nothing_names_it_and_the_known_tools() -> None:
    with pytest.raises(ValueError) as raised:
        builtin_registry().subset(["github__*", "read_file", "rm_rf", "slack__*"])
    assert str(raised.value) == (
        "unknown tool(s): rm_rf; no tool matches 'github__*'; no tool matches 'slack__*'; "
        "known tools: bash, delete_cell, edit_cell, edit_file, grep, insert_cell, list_files, "
        "list_variables, propose_cell, python, read_file, read_notebook, write_file"
    )


def test_two_tools_with_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="read_file"):
        ToolRegistry([ReadFile(), ReadFile()])


# ---------------------------------------------------------------- schemas


@pytest.mark.parametrize("name", BUILTINS)
def test_schema_is_a_closed_json_schema_object(name: str) -> None:
    import jsonschema  # noqa: PLC0415

    tool = builtin_registry().get(name)
    assert tool is not None
    schema = tool.schema()
    assert schema.name == name
    assert schema.version == "1"
    assert len(schema.description) > 20
    parameters = dict(schema.parameters)
    jsonschema.Draft202012Validator.check_schema(parameters)
    assert parameters["type"] == "object"
    assert parameters["additionalProperties"] is False
    assert set(parameters.get("required", ())) <= set(parameters["properties"])
    for field, spec in parameters["properties"].items():
        assert spec.get("description"), f"{name}.{field} has no description"


EXAMPLES: dict[str, dict[str, Any]] = {
    "read_file": {"path": "a.txt"},
    "list_files": {},
    "grep": {"pattern": "x"},
    "write_file": {"path": "a", "content": ""},
    "edit_file": {"path": "a", "old_string": "x", "new_string": "y"},
    "bash": {"command": "true"},
    "python": {"code": "1"},
    "list_variables": {},
    "propose_cell": {"code": "1"},
    "read_notebook": {},
    "edit_cell": {"cell_id": "c", "source": "1"},
    "insert_cell": {"after_cell_id": "c", "source": "1"},
    "delete_cell": {"cell_id": "c"},
}


@pytest.mark.parametrize("name", BUILTINS)
def test_effective_arguments_satisfy_the_schema(name: str) -> None:
    import jsonschema  # noqa: PLC0415

    tool = builtin_registry().get(name)
    assert tool is not None
    effective = tool.effective_arguments(EXAMPLES[name])
    jsonschema.validate(effective, dict(tool.schema().parameters))
    assert tool.effective_arguments(effective) == effective  # recording is idempotent


# ---------------------------------------------------------------- effective arguments


def test_effective_arguments_fill_in_defaults() -> None:
    registry = builtin_registry()
    read, listing, bash = (
        registry.get("read_file"),
        registry.get("list_files"),
        registry.get("bash"),
    )
    assert read and listing and bash
    assert read.effective_arguments({"path": "a"}) == {"path": "a", "offset": 1, "limit": None}
    assert listing.effective_arguments({}) == {"path": ".", "pattern": None, "recursive": False}
    assert bash.effective_arguments({"command": "ls"}) == {"command": "ls", "timeout": 120.0}
    assert bash.effective_arguments({"command": "ls", "timeout": 5})["timeout"] == 5.0


@pytest.mark.parametrize(
    ("name", "arguments", "problem"),
    [
        ("read_file", {"path": "a", "mode": "r"}, "mode: Extra inputs are not permitted"),
        ("read_file", {}, "path: Field required"),
        ("read_file", {"path": "a", "offset": "3"}, "offset: Input should be a valid integer"),
        ("read_file", {"path": "a", "offset": True}, "offset: Input should be a valid integer"),
        ("read_file", {"path": "a", "offset": 0}, "offset: Input should be greater than"),
        ("read_file", {"path": 7}, "path: Input should be a valid string"),
        ("list_files", {"recursive": "yes"}, "recursive: Input should be a valid boolean"),
        ("bash", {"command": "ls", "timeout": 0}, "timeout: Input should be greater than 0"),
        ("edit_file", {"path": "a", "old_string": "x"}, "new_string: Field required"),
    ],
)
def test_effective_arguments_reject_what_does_not_fit(
    name: str, arguments: dict[str, Any], problem: str
) -> None:
    tool = builtin_registry().get(name)
    assert tool is not None
    with pytest.raises(ToolArgumentError, match=f"invalid arguments for {name}: ") as raised:
        tool.effective_arguments(arguments)
    assert problem in str(raised.value)


def test_run_with_bad_arguments_is_an_error_result_not_an_exception(tmp_path: Path) -> None:
    out = ReadFile().run({"path": "a", "bogus": 1}, ToolContext(workspace=tmp_path))
    assert out.is_error
    assert out.content.startswith("invalid arguments for read_file: bogus")


# ---------------------------------------------------------------- output


def test_truncate_keeps_head_and_tail() -> None:
    assert truncate("abc", 3) == "abc"
    assert truncate("0123456789", 6) == "0123\n[... 4 characters truncated ...]\n89"
    assert truncate("0123456789", 0) == "\n[... 10 characters truncated ...]\n"


@given(
    text=st.text(max_size=300),
    limit=st.integers(min_value=0, max_value=120),
    cuts=st.lists(st.integers(min_value=0, max_value=1200), max_size=8),
)
def test_capped_output_equals_truncating_the_whole_stream(
    text: str, limit: int, cuts: list[int]
) -> None:
    data = text.encode("utf-8")
    capped = CappedOutput(limit)
    # Arbitrary byte boundaries, including inside multi-byte characters.
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    for start, end in pairwise(bounds):
        capped.feed(data[start:end])
    assert capped.text() == truncate(text, limit)
    assert capped.total == len(text)


def test_tool_output_defaults_to_success() -> None:
    assert ToolOutput("x") == ToolOutput("x", is_error=False)
