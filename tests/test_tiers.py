"""The suite's tiers hold (tests/helpers/tiers.py): a test outside the integration tier
that starts a kernel, JupyterLab, Chromium, an MCP server or a real model server is caught
as it starts it, and what puts a test in the tier names things that exist."""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

from helpers import tiers

TESTS = Path(__file__).resolve().parent
# A fixture's definition (every one is `@pytest.fixture`, with or without arguments, then
# the function, other decorators between): read as text, not parsed (~1 s of CPU).
FIXTURE = re.compile(
    r"^[ \t]*@pytest\.fixture\b.*\n(?:[ \t]*@.*\n)*[ \t]*def (\w+)\(", re.MULTILINE
)


def test_a_test_outside_the_tier_that_starts_an_integration_process_is_caught() -> None:
    # Command lines of each kind's shape that start nothing but `true`: the hook judges a
    # process by its command line, the moment it starts.
    for word, kind in tiers.PROCESSES.items():
        subprocess.run(["true", f"/some/where/{word}"], check=True)
        (started,) = tiers.take_started()
        assert started.startswith(f"{kind} ("), (word, started)
    subprocess.run(["true", "/some/where/bench/bench_any.py"], check=True)
    (started,) = tiers.take_started()
    assert started.startswith("a benchmark script, run whole ("), started
    subprocess.run(["true", "-m", "ipykernel"], check=True)
    assert tiers.take_started() == []  # a word of its own, not a part of one


def test_the_fixtures_and_helpers_that_put_a_test_in_the_tier_exist() -> None:
    """A renamed fixture or helper would silently let its tests into the fast tier."""
    fixtures = {
        name for path in TESTS.rglob("*.py") for name in FIXTURE.findall(path.read_text("utf-8"))
    }
    assert set(tiers.INTEGRATION_FIXTURES) <= fixtures, set(tiers.INTEGRATION_FIXTURES) - fixtures
    for name in tiers.INTEGRATION_HELPERS:
        module, _, attribute = name.rpartition(".")
        assert hasattr(importlib.import_module(module), attribute), name
