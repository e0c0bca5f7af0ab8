"""Children a test crashes, interrupts or runs out of disk under: scripts of tests/children,
each a fresh interpreter importing the package (a second of CPU or more each; a crash loop
runs one per kill). A module that imports `run_child` or `start_child` is in the
integration tier (tests/helpers/tiers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHILDREN = Path(__file__).resolve().parent.parent / "children"


def _argv(script: str, args: tuple[str, ...]) -> list[str]:
    return [sys.executable, str(CHILDREN / script), *args]


def _env() -> dict[str, str]:
    """This process's environment, its sys.path as PYTHONPATH (the tests' own modules)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def run_child(script: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`python tests/children/SCRIPT ARGS` to its end, its output captured."""
    return subprocess.run(_argv(script, args), env=_env(), capture_output=True, check=False)


def start_child(script: str, *args: str) -> subprocess.Popen[str]:
    """`python tests/children/SCRIPT ARGS` started, its stdout and stderr piped as text."""
    return subprocess.Popen(
        _argv(script, args),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
