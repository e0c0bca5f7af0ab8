"""The one error tree: every exception class the package defines is a TinyAgentError, and
the tree drawn in tiny_agent_nb/_exceptions.py is the tree the classes make."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

import tiny_agent_nb
from tiny_agent_nb import TinyAgentError

# The first two tests import every module of the package (the MCP SDK and pydantic's
# models with them): ~3 s of CPU in each worker that runs one, paid once on one worker.
pytestmark = pytest.mark.xdist_group("errors")

PACKAGE = Path(tiny_agent_nb.__file__).resolve().parent
# A drawn line: its box-drawing indent, the class, then "package: what it is".
LINE = re.compile(r"^(?P<indent>[│├└─ ]*)(?P<name>\w+)\s+(?:(?P<package>\w+): )?(?P<what>.*)$")


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def defined_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class a module of the package defines, by name: found by reading
    the source (so none is missed for not being exported), then imported."""
    found: dict[str, type[BaseException]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__main__.py":
            continue
        module = importlib.import_module(_module(path))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            value = getattr(module, node.name, None)
            if isinstance(value, type) and issubclass(value, BaseException):
                assert node.name not in found, f"two exception classes named {node.name}"
                found[node.name] = value
            elif value is None and any("Error" in ast.unparse(b) for b in node.bases):
                pytest.fail(f"{module.__name__}: define {node.name} at module level")
    return found


def drawn_tree() -> dict[str, tuple[str | None, str | None, str]]:
    """name -> (parent, package, description) as the docstring draws them."""
    doc = sys.modules[TinyAgentError.__module__].__doc__ or ""
    lines = [line[4:] for line in doc.splitlines() if line.startswith("    ")]
    tree: dict[str, tuple[str | None, str | None, str]] = {}
    stack: list[tuple[int, str]] = []
    for line in lines:
        match = LINE.match(line)
        assert match is not None, f"not a line of the tree: {line!r}"
        depth = len(match["indent"])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        name = match["name"]
        assert name not in tree, f"{name} is drawn twice"
        tree[name] = (stack[-1][1] if stack else None, match["package"], match["what"])
        stack.append((depth, name))
    return tree


def _drawn_parent(cls: type[BaseException], ours: set[type[BaseException]]) -> str:
    """The nearest base of the package's own tree (a foreign base, ValueError, is not one)."""
    bases = [base for base in cls.__bases__ if base in ours]
    assert len(bases) == 1, f"{cls.__name__} derives from {len(bases)} classes of the tree"
    return bases[0].__name__


def test_every_exception_the_package_defines_is_a_tiny_agent_error() -> None:
    found = defined_exceptions()
    assert len(found) > 20  # the scan sees the package's classes
    outside = [f"{c.__module__}.{n}" for n, c in found.items() if not issubclass(c, TinyAgentError)]
    assert not outside, f"derive these from TinyAgentError: {outside}"


def test_the_drawn_tree_is_the_tree_of_the_classes() -> None:
    found = defined_exceptions()
    ours = set(found.values())
    tree = drawn_tree()
    assert tree["TinyAgentError"][0] is None
    public = {name for name in found if not name.startswith("_")}
    assert set(tree) == public, (
        f"not drawn: {sorted(public - set(tree))}; drawn but not defined: "
        f"{sorted(set(tree) - public)}"
    )
    for name, (parent, package, what) in tree.items():
        cls = found[name]
        if cls is TinyAgentError:
            continue
        assert _drawn_parent(cls, ours) == parent, f"{name} is drawn under {parent}"
        assert cls.__module__.split(".")[1] == package, f"{name} is not in {package}/"
        for base in cls.__bases__:
            if base not in ours:  # a foreign base the class keeps is said in its line
                assert base.__name__ in what, f"{name}'s line does not say {base.__name__}"


def test_each_package_still_exports_its_errors_where_it_did() -> None:
    from tiny_agent_nb.agent import AgentError  # noqa: PLC0415
    from tiny_agent_nb.mcp import McpConfigError  # noqa: PLC0415
    from tiny_agent_nb.notebook import NotebookError  # noqa: PLC0415
    from tiny_agent_nb.provider import ProviderError  # noqa: PLC0415
    from tiny_agent_nb.session import SessionError, SessionLockedError  # noqa: PLC0415
    from tiny_agent_nb.tools import OutsideWorkspaceError, ToolError  # noqa: PLC0415

    for cls in (AgentError, McpConfigError, NotebookError, ProviderError, SessionError):
        assert issubclass(cls, TinyAgentError)
    assert issubclass(SessionLockedError, SessionError)
    assert issubclass(OutsideWorkspaceError, ToolError)
    assert issubclass(McpConfigError, ValueError)  # what caught it before still does


def test_one_except_catches_an_error_of_any_package(tmp_path: Path) -> None:
    from tiny_agent_nb.session import load_session  # noqa: PLC0415

    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(TinyAgentError, match="not a tiny-agent-nb session"):
        load_session(empty)
