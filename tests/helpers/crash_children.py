"""A crash loop's child: a script of tests/children that a test runs over and over, killing
it (or letting it kill itself) with SIGKILL at each step. A module that imports `run_child`
is in the integration tier (tests/helpers/tiers.py): each child is a fresh interpreter
importing the package, a second of CPU or more per kill."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHILDREN = Path(__file__).resolve().parent.parent / "children"


def run_child(script: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`python tests/children/SCRIPT ARGS` to its end, on this process's sys.path, its
    output captured."""
    return subprocess.run(
        [sys.executable, str(CHILDREN / script), *args],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        check=False,
    )
