"""The wheel, built offline from a copy of the source: what an install outside a clone gets."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Both tests read the one wheel the module builds: one worker builds it in a parallel run.
pytestmark = pytest.mark.xdist_group("packaging")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy: an in-tree build would leave build/ and *.egg-info in the clone.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "tiny_agent_nb",
        source / "tiny_agent_nb",
        ignore=shutil.ignore_patterns("__pycache__", "*.agent*.jsonl"),
    )
    shutil.copytree(
        REPO / "notebooks",
        source / "notebooks",
        ignore=shutil.ignore_patterns("*.agent*.jsonl", ".ipynb_checkpoints"),
    )
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = out.glob("tiny_agent_nb-*.whl")
    return path


def test_the_wheel_ships_the_example_notebooks_and_type_marker(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "tiny_agent_nb/examples/crash-and-resume.ipynb",
        "tiny_agent_nb/examples/quickstart.ipynb",
        "tiny_agent_nb/examples/README.md",
        "tiny_agent_nb/py.typed",
        "tiny_agent_nb/session/_store.py",
    ):
        assert shipped in names
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]


def test_the_wheel_holds_every_module_of_the_package(wheel: Path) -> None:
    # pyproject.toml lists the packages (the notebooks are a mapped one): a new subpackage
    # left off the list would be missing from every install but a clone.
    names = set(zipfile.ZipFile(wheel).namelist())
    package = REPO / "tiny_agent_nb"
    modules = {p.relative_to(REPO).as_posix() for p in package.rglob("*.py")}
    assert modules - names == set()


def test_the_installed_demo_finds_its_notebook_without_the_clone(
    wheel: Path, tmp_path: Path
) -> None:
    """`tiny-agent-nb demo` after `pip install tiny-agent-nb[demo]`: the notebook comes
    from the installed package, not from a repository beside it."""
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
    )
    probe = (
        "import json, sys, tiny_agent_nb, tiny_agent_nb.demo as d; "
        "assert tiny_agent_nb.__file__.startswith(sys.argv[1]), tiny_agent_nb.__file__; "
        "cells = json.loads(d.example_notebook(d.NOTEBOOK))['cells']; "
        "print(sum('kernel-dies' in c['metadata'].get('tags', []) for c in cells))"
    )
    ran = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(site)!r}); " + probe,
            str(site),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "1"  # the one cell whose kernel dies


def _distribution(requirement: str) -> str:
    """`mcp-types>=2.3,<3` -> `mcp-types`, normalized as PEP 503 does."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group()).lower()


def test_every_package_the_code_imports_is_declared() -> None:
    # A package that only arrives as another's dependency (traitlets with IPython, anyio
    # with the MCP SDK) can be dropped by it in any release.
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    optional = [r for extra, rs in extras.items() if extra != "test" for r in rs]
    declared = {_distribution(r) for r in [*project["dependencies"], *optional]}
    imported: dict[str, str] = {}
    for module in sorted((REPO / "tiny_agent_nb").rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top in sys.stdlib_module_names or top in ("tiny_agent_nb", "__future__"):
                    continue
                imported.setdefault(top, module.relative_to(REPO).as_posix())
    owners = packages_distributions()
    undeclared = [
        f"{top} ({where})"
        for top, where in sorted(imported.items())
        if not {_distribution(d) for d in owners.get(top, [top])} & declared
    ]
    assert undeclared == []
