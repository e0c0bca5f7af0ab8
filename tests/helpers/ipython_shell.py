"""An in-process IPython shell for the notebook tests: the working directory, IPython's
history and the session file in the test's tmp, the environment as the test sets it."""

from __future__ import annotations

import atexit
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import IPython.core.completer  # noqa: F401  (before any shell: see _release)
import pytest
from IPython.core.interactiveshell import InteractiveShell

from helpers.openai_server import OpenAIServer

__all__ = ["KEY", "OFFLINE", "fresh_shell", "run", "served", "shell"]

# The key of the `shell` fixture's kernel: a test asserts it is never shown or written.
KEY = "sk-or-v1-TOPSECRET-abcdef0123456789"

# Nothing configured: the offline demo model answers.
OFFLINE: Mapping[str, str | None] = {
    "TINY_AGENT_API_KEY": None,
    "OPENROUTER_API_KEY": None,
    "TINY_AGENT_BASE_URL": None,
}


def served(base_url: str, key: str | None) -> dict[str, str | None]:
    """The environment of a kernel whose model is the loopback server at `base_url`."""
    return {
        "TINY_AGENT_BASE_URL": base_url,
        "TINY_AGENT_MODEL": "test/model",
        "TINY_AGENT_API_KEY": key,
    }


def fresh_shell(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: Mapping[str, str | None],
    notebook: str = "analysis.ipynb",
    approve: str | None = "auto",
) -> Iterator[InteractiveShell]:
    """A new shell for `notebook` (its session file is found through JPY_SESSION_NAME);
    `env` sets a variable, or deletes it where the value is None. `approve`: the shell's
    `TinyAgent.approve`, `auto` for the tests that are not about approval (no one answers
    a question here); None leaves the product's default. Unloads at the end."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / ".ipython"))  # history stays in tmp
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / notebook))
    # The shell installs its namespace as sys.modules["__main__"]; the test process's
    # comes back at the end, and with it nothing refers to the shell (see _release).
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance()
    if approve is not None:
        shell.config.TinyAgent.approve = approve
    yield shell
    shell.run_line_magic("unload_ext", "tiny_agent_nb")
    InteractiveShell.clear_instance()
    _release(shell)


def _release(shell: InteractiveShell) -> None:
    """Let the process drop the shell now instead of holding it until exit.

    IPython registers every shell's exit work with atexit (a namespace reset that runs a
    full gc.collect(), and a sweep of %%script jobs) and starts a history thread per
    shell, also stopped at exit. A worker that ran a few dozen shell tests collected its
    whole heap once per shell on its way out: seconds per worker, and the run's end
    waited for the slowest worker (xdist kills one after 10 s). The history database is
    in tmp_path and nothing reads it after the test: the thread is stopped and the exit
    work dropped.

    IPython.core.completer runs `import __main__` when first imported and keeps that
    module as a global for the process's life. Since IPython 9.17 `import IPython` no
    longer imports it (9.16 did, through IPython.terminal): the first shell's
    init_completer does, while sys.modules["__main__"] is that shell's namespace, whose
    get_ipython holds the shell. This module imports it first, with the test process's
    __main__ in place."""
    atexit.unregister(shell.atexit_operations)
    script_magics = shell.magics_manager.registry.get("ScriptMagics")
    if script_magics is not None:  # %%bash and friends: kills their background jobs
        atexit.unregister(script_magics.kill_bg_processes)
    thread = shell.history_manager.save_thread if shell.history_manager else None
    if thread is not None:
        atexit.unregister(thread.stop)
        thread.stop()


@pytest.fixture
def shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: OpenAIServer
) -> Iterator[InteractiveShell]:
    """A shell for analysis.ipynb whose model is the loopback `server`, reached with KEY."""
    yield from fresh_shell(tmp_path, monkeypatch, served(server.base_url, KEY))


def run(shell: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run a cell that must not raise; what it printed (stdout, then stderr)."""
    result = shell.run_cell(code)
    out = capsys.readouterr()
    assert result.error_in_exec is None, out
    return out.out + out.err


def run_clean(shell: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run a cell that must not raise, print a traceback or write to stderr; its stdout."""
    result = shell.run_cell(code)
    out = capsys.readouterr()
    assert result.error_in_exec is None, out
    assert out.err == "" and "Traceback" not in out.out, out
    return out.out
