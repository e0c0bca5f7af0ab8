"""The house's layers are sealed: every import arrow points down, and no module reaches
into another package's private modules.

Each module's imports are read with `ast` (nothing is imported), so the rule holds for
imports inside functions and under TYPE_CHECKING too: a name a module speaks of is an
arrow as much as one it loads.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tiny_agent_nb"

# Low to high: a layer imports only layers of a lower rank (never one of its own rank
# but another name, never a higher one). `_version` is the leaf every layer may read.
RANKS: dict[str, int] = {
    "_version": 0,
    "words": 0,  # money, tokens, shortened and printable text, tool labels (imports nothing)
    "_exceptions": 0,  # the root of the one error tree (every package derives from it)
    "redaction": 0,  # what is a secret, and the one redactor (imports nothing of ours)
    "_guard": 0,  # the process guard: a script run by path, stdlib only (tools and mcp start it)
    "session": 1,  # the file format, the store, the reducer: the deep module
    "tools": 2,  # the tool protocol and the built-in tools (owns ToolSchema)
    "timeline": 2,  # the timeline read from a session
    "safe_markdown": 2,  # escaping untrusted text for markdown
    "provider": 3,  # the chat-completions wire format and client (speaks of ToolSchema)
    "render": 4,  # HTML and text of a timeline (names the demo model)
    "mcp": 4,  # MCP servers' tools (a Tool; URL redaction from the provider)
    "agent": 5,  # planner, context projection, compaction, the loop
    "demo": 5,  # the headless demo notebook runner
    "cli": 6,  # the command line
    "notebook": 6,  # the IPython glue
    "__init__": 7,  # the package root: load_ipython_extension
    "__main__": 7,  # python -m tiny_agent_nb
}


def _layer(module: str) -> str:
    """`tiny_agent_nb.session._store` -> `session`; the root package -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


# The three checks that walk every module's tree (~0.45 s to parse them all) run on one
# worker, in order (`xdist_group`), so that they parse once.
WALKS_EVERY_MODULE = pytest.mark.xdist_group("walks_every_module")


@functools.cache
def _tree(path: Path) -> ast.Module:
    """`path` parsed, once per test process (see WALKS_EVERY_MODULE)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module or module.name) for every import of the package's own."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                # `from ..session import facts` may name a module: both are checked.
                yield node.lineno, f"{source}.{alias.name}"


@functools.cache
def _own_imports() -> tuple[tuple[str, int, str], ...]:
    """(module, line, imported) for each import of the package's own, once per process."""
    return tuple(
        (module, line, target)
        for module, path in _modules()
        for line, target in _imports(module, path)
        if target == "tiny_agent_nb" or target.startswith("tiny_agent_nb.")
    )


def import_graph() -> dict[str, set[str]]:
    """Which layer imports which (arrows between layers only)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, _, target in _own_imports():
        source, dest = _layer(module), _layer(target)
        if source != dest and target != "tiny_agent_nb.__version__":
            graph[source].add(dest)
    return graph


def test_every_module_belongs_to_a_ranked_layer() -> None:
    unranked = {_layer(module) for module, _ in _modules()} - set(RANKS)
    assert not unranked, f"give these layers a rank in RANKS: {sorted(unranked)}"


@WALKS_EVERY_MODULE
def test_every_import_arrow_points_down_the_layers() -> None:
    upward = [
        f"{module} (line {line}) imports {target}: {_layer(module)} "
        f"(rank {RANKS[_layer(module)]}) -> {_layer(target)} (rank {RANKS[_layer(target)]})"
        for module, line, target in _own_imports()
        if _layer(module) != _layer(target)
        and target != "tiny_agent_nb.__version__"
        and RANKS[_layer(target)] >= RANKS[_layer(module)]
    ]
    assert not upward, "\n".join(upward)


@WALKS_EVERY_MODULE
def test_no_module_imports_another_packages_private_module() -> None:
    private = []
    for module, line, target in _own_imports():
        parts = target.split(".")
        # tiny_agent_nb.<package>._<module>...: private unless it is the importer's own
        # package (the root's private leaf `_version` is a layer of its own).
        if (
            len(parts) > 2
            and parts[2].startswith("_")
            and not parts[2].startswith("__")
            and _layer(target) != _layer(module)
        ):
            private.append(f"{module} (line {line}) imports {target}")
    assert not private, "\n".join(private)


def test_the_layer_check_sees_an_upward_arrow_and_a_private_import(tmp_path: Path) -> None:
    # The checks above pass on an empty list: show they would catch what they forbid.
    bad = tmp_path / "tiny_agent_nb" / "session" / "_bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("from ..agent import AgentLoop\nfrom ..tools._base import Tool\n")
    found = list(_imports("tiny_agent_nb.session._bad", bad))
    assert (1, "tiny_agent_nb.agent.AgentLoop") in found
    assert (2, "tiny_agent_nb.tools._base.Tool") in found
    assert RANKS[_layer("tiny_agent_nb.agent.AgentLoop")] > RANKS["session"]


# What a user imports outside a notebook, in an order where each adds to the last.
IPYTHON_FREE = [
    "tiny_agent_nb",
    "tiny_agent_nb.session",
    "tiny_agent_nb.tools",
    "tiny_agent_nb.provider",
    "tiny_agent_nb.agent",
    "tiny_agent_nb.cli",
]


def test_the_ipython_free_layers_import_neither_ipython_nor_an_http_client() -> None:
    # IPython loads with `%load_ext` only; httpx (perf: register row "lazy-imports") with
    # the first real request's Provider: a CLI command or an offline kernel pays neither.
    # And the tools do not load the provider: tools owns ToolSchema, the provider only
    # names it (under TYPE_CHECKING). One fresh interpreter for both.
    code = (
        "import importlib, json, sys\n"
        f"for name in {IPYTHON_FREE!r}:\n"
        "    importlib.import_module(name)\n"
        "    heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('IPython', 'httpx'))\n"
        "    print(json.dumps([name, heavy, 'tiny_agent_nb.provider' in sys.modules]))\n"
        "from tiny_agent_nb.provider import Provider\n"
        "print(json.dumps(['Provider', 'httpx' in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line[:2] for line in lines[:-1]] == [[name, []] for name in IPYTHON_FREE]
    loaded = {name: provider for name, _, provider in lines[:-1]}
    assert loaded["tiny_agent_nb.tools"] is False  # imported after session, before provider
    assert lines[-1] == ["Provider", True]  # the lazy name still gives the client


TESTS = Path(__file__).resolve().parent


def _tested_layer(test_file: Path) -> str | None:
    """`test_session_store.py` -> `session`; a repository-wide test -> None."""
    name = test_file.stem.removeprefix("test_")
    layers = [layer for layer in RANKS if name == layer or name.startswith(f"{layer}_")]
    return max(layers, key=len) if layers else None


# A statement that imports from the package, wherever it stands (a function, TYPE_CHECKING):
# only these are parsed, not the 36k lines of tests around them (~1 s of CPU).
PACKAGE_IMPORT = re.compile(
    r"^[ \t]*(?:from tiny_agent_nb[\w.]* import (?:\([^)]*\)|.*)|import tiny_agent_nb.*)$",
    re.MULTILINE,
)


def _package_imports(test_file: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module or module.name) for every import a test makes of the package."""
    text = test_file.read_text(encoding="utf-8")
    for match in PACKAGE_IMPORT.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        for node in ast.walk(ast.parse(match.group().strip())):
            if isinstance(node, ast.Import):
                yield from ((line, alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                yield from ((line, f"{node.module}.{alias.name}") for alias in node.names)


def test_a_test_imports_private_modules_of_the_layer_it_tests_only() -> None:
    # Everything else a test reaches through public names, as a user would: so the
    # private modules of a layer can move without breaking another layer's tests.
    found = []
    for test_file in sorted(TESTS.glob("test_*.py")):
        layer = _tested_layer(test_file)
        for line, target in _package_imports(test_file):
            parts = target.split(".")
            if parts[0] != "tiny_agent_nb" or len(parts) < 3:
                continue
            if parts[2].startswith("_") and not parts[2].startswith("__") and parts[1] != layer:
                found.append(f"{test_file.name} (line {line}) imports {target}")
    assert not found, "\n".join(found)


def _private_names(cls: ast.ClassDef) -> set[str]:
    """The underscore names a class defines: its methods, class attributes and the
    attributes its methods set on `self`."""
    names: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _own_instances(function: ast.FunctionDef | ast.AsyncFunctionDef, cls: str) -> set[str]:
    """The names that hold the class `cls` or one of its instances in one of its methods:
    self and cls, the class's own name, a parameter annotated with it, a name made by
    `cls(...)` or `cls.factory(...)`, a name an `isinstance(name, cls)` narrows."""
    names = {"self", "cls", cls}
    for arg in [*function.args.args, *function.args.kwonlyargs]:
        if arg.annotation is not None and cls in ast.unparse(arg.annotation).split(" | "):
            names.add(arg.arg)
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = node.value.func
            if isinstance(called, ast.Attribute):
                called = called.value
            if isinstance(called, ast.Name) and called.id in ("cls", cls):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "isinstance"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Name)
            and ast.unparse(node.args[1]) == cls
        ):
            names.add(node.args[0].id)
    return names


def private_field_uses(paths: list[Path]) -> list[str]:
    """Each place in `paths` where code outside a class touches an underscore name one of
    their classes defines (`state._tables`, `source._fd`), as `file:line: code`."""
    trees = {path: _tree(path) for path in paths}
    defined: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                defined |= _private_names(node)
    found: list[str] = []

    def visit(node: ast.AST, path: Path, cls: str | None, own: frozenset[str]) -> None:
        if isinstance(node, ast.ClassDef):
            cls, own = node.name, frozenset({"self", "cls"})
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and cls is not None:
            own = own | _own_instances(node, cls)
        if isinstance(node, ast.Attribute) and node.attr in defined:
            held = node.value
            if not (isinstance(held, ast.Name) and held.id in own):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, path, cls, own)

    for path, tree in trees.items():
        visit(tree, path, None, frozenset({"self", "cls"}))
    return found


@WALKS_EVERY_MODULE
def test_no_module_touches_another_classs_private_fields() -> None:
    # A class's underscore fields are its own: a state's tables change through its
    # methods, a source's descriptor is read through its own (`held_bytes`, `read_into`).
    found = private_field_uses([path for _, path in _modules()])
    assert not found, "\n".join(found)


def test_the_private_field_check_sees_a_field_read_from_outside(tmp_path: Path) -> None:
    # The check above passes on an empty list: show it would catch what it forbids, and
    # let a class's own methods be.
    module = tmp_path / "_state.py"
    module.write_text(
        "class State:\n"
        "    def __init__(self):\n"
        "        self._tables = {}\n"
        "    @classmethod\n"
        "    def made(cls):\n"
        "        state = cls()\n"
        "        state._tables = {'made': 1}\n"
        "        return state\n"
        "    def __eq__(self, other):\n"
        "        return isinstance(other, State) and other._tables == self._tables\n"
        "\n"
        "class Reader:\n"
        "    def __init__(self, state):\n"
        "        self._state = state\n"
        "    def tables(self):\n"
        "        return self._state._tables\n"
        "\n"
        "def pieces(state):\n"
        "    return state._tables\n"
    )
    assert private_field_uses([module]) == [
        "_state.py:16: self._state._tables",
        "_state.py:19: state._tables",
    ]
