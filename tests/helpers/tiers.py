"""The suite's two tiers. `integration`: the tests that start a Jupyter kernel, JupyterLab,
Chromium, a crash loop's SIGKILLed children (or a child interrupted or out of disk), an MCP
server process or a real model server, that build the wheel, a 10k-fact session or run a
benchmark script whole, and the `slow` ones (long by themselves). The rest is the loop a
contributor runs after every edit, `python3 -m pytest -m "not integration"`.

A test is in the tier by what it uses, never by a marker of its own (tests/conftest.py
calls `mark`): a fixture of INTEGRATION_FIXTURES (asked for however indirectly), or a
helper of INTEGRATION_HELPERS that its module imports. A test outside the tier that
starts such a process anyway is caught as it starts it (`watch`: an audit hook sees every
process this test process starts) and fails, naming what it started.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

INTEGRATION_FIXTURES = {
    "start_kernel": "Jupyter kernels",
    "lab": "JupyterLab",
    "browser": "Chromium",
    "forkserver": "a crash loop's SIGKILLed children",
    "http_server": "an MCP server over HTTP",
    "sdk_client": "an MCP client and the server it starts",
    "llama_server": "a llama-cpp-python server",
    "wheel": "the package's wheel, built and installed by pip",
    "startup_session": "a 10k-fact session (7,800 commits to build, once per process)",
}
# "module.name" of the helpers that start those processes without a fixture.
INTEGRATION_HELPERS = {
    "helpers.kernel_helpers.Kernel": "Jupyter kernels",
    "tiny_agent_nb.demo.run_notebook": "Jupyter kernels (nbclient)",
    "helpers.mcp_helpers.stdio_entry": "MCP server processes",
    "helpers.mcp_helpers.HttpTestServer": "an MCP server over HTTP",
    "helpers.mcp_helpers.process_entry": "MCP server processes",
    "helpers.bench_scripts.run_bench": "a benchmark script, run whole",
    "helpers.crash_children.run_child": "a crash loop's SIGKILLed children",
    "helpers.crash_children.start_child": "a child crashed, interrupted or out of disk",
}
# What each kind of process has as one word of its command line.
PROCESSES = {
    "ipykernel_launcher": "a Jupyter kernel",
    "jupyterlab": "JupyterLab",
    "run-driver": "Playwright's driver (Chromium)",
    "mcp_test_server.py": "an MCP server",
    "mcp_zygote.py": "an MCP server",
    "mcp_hostile_server.py": "an MCP server",
    "mcp_lingering_server.py": "an MCP server",
    "mcp_server_time": "an MCP server",
    "mcp_guard_client.py": "an MCP client and its server",
    "llama_cpp.server": "a llama-cpp-python server",
}


def why_integration(item: pytest.Item) -> str | None:
    """What puts `item` in the integration tier, or None."""
    if item.get_closest_marker("slow") is not None:
        return "marked slow"
    for name in getattr(item, "fixturenames", ()):
        if name in INTEGRATION_FIXTURES:
            return f"the fixture {name}: {INTEGRATION_FIXTURES[name]}"
    module = getattr(item, "module", None)
    for value in vars(module).values() if module is not None else ():
        name = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
        if name in INTEGRATION_HELPERS:
            return f"its module imports {name}: {INTEGRATION_HELPERS[name]}"
    return None


def mark(items: Iterable[pytest.Item]) -> None:
    for item in items:
        if why_integration(item) is not None:
            item.add_marker(pytest.mark.integration)


# ------------------------------------------------------------------ the guard

_outside: list[bool] = [False]  # the running test is outside the tier
_started: list[str] = []  # what it started that belongs to the tier


def process_kind(argv: Iterable[object]) -> str | None:
    """The kind of integration process a command line starts, or None."""
    for word in argv:
        text = str(word)
        kind = PROCESSES.get(text) or PROCESSES.get(Path(text).name)
        if kind is not None:
            return kind
        if Path(text).parent.name == "bench" and text.endswith(".py"):
            return "a benchmark script, run whole"
    return None


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event != "subprocess.Popen" or not _outside[0]:
        return
    argv = args[1]
    kind = process_kind(argv if isinstance(argv, (list, tuple)) else [argv])
    if kind is not None:
        _started.append(f"{kind} ({' '.join(map(str, argv))[:200]})")  # type: ignore[arg-type]


def watch() -> None:
    """Install the audit hook (once per test process; it cannot be removed)."""
    sys.addaudithook(_audit)


def begin(item: pytest.Item) -> None:
    _outside[0] = item.get_closest_marker("integration") is None
    _started.clear()


def take_started() -> list[str]:
    """What the running test started that belongs to the integration tier (and forget it)."""
    started = list(_started)
    _started.clear()
    return started


def end(item: pytest.Item) -> None:
    started = take_started()
    _outside[0] = False
    if started:
        raise AssertionError(
            f"{item.nodeid} is outside the integration tier but started "
            + "; ".join(started)
            + ": start it through a fixture or helper of tests/helpers/tiers.py"
            " (or add the one it used there)"
        )
