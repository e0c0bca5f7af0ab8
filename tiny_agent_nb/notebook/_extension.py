"""Loading the extension into a shell (`%load_ext tiny_agent_nb`) and unloading it: the
kernel's agent, its magics, and the session of the notebook, found (or followed, when the
notebook was renamed, moved or duplicated) and opened."""

from __future__ import annotations

import atexit
import os
import weakref
from pathlib import Path
from typing import Any

from ..provider import DEMO_LABEL
from ._config import TinyAgent
from ._links import follow_notebook
from ._magics import AgentMagics
from ._opening import NotebookError
from ._paths import resolve_session_path
from ._proposal import cell_proposer
from ._runtime import NotebookAgent

# Said once per kernel (a shell), when the extension is first loaded in demo mode: not
# again on a reload, `%agent new` or `%agent session`. Short lines: a terminal or a cell
# output wraps long ones mid-word.
DEMO_NOTE = f"""\
tiny-agent-nb: no API key and no base URL configured, so %%agent cells use the
  {DEMO_LABEL.upper()}. It runs the ```bash
  blocks of a prompt and reports what happened to each command.
  For a real model set OPENROUTER_API_KEY, or TinyAgent.base_url
  (env TINY_AGENT_BASE_URL) for a local OpenAI-compatible server."""
_told_demo: weakref.WeakSet[Any] = weakref.WeakSet()


def load(shell: Any) -> AgentMagics:
    config = TinyAgent(parent=shell)
    if config not in shell.configurables:
        shell.configurables.append(config)
    agent = NotebookAgent(
        config,
        shell.user_ns,
        hidden_variables=shell.user_ns_hidden,
        propose_cell=cell_proposer(shell),
    )
    # A kernel that exits without `%unload_ext` closes the session (its HTTP client and
    # its lock) too, leaving its displays as they are.
    atexit.register(agent.shutdown)
    magics = AgentMagics(shell, agent)
    shell.register_magics(magics)
    shell.events.register("post_run_cell", magics.refresh_views)
    shell.events.register("post_run_cell", magics.record_cell)
    location = resolve_session_path(
        explicit=config.session_path, environ=os.environ, user_ns=shell.user_ns, cwd=Path.cwd()
    )
    moved = follow_notebook(location, Path.cwd())
    if moved is not None:
        print(moved)
    try:
        magics.show_report(agent.open(location))
        magics.link()
    except NotebookError as exc:
        print(exc)
    # Not in a session a real model worked on: its report says how to configure that one.
    if config.demo_mode() and not agent.session_model.real and shell not in _told_demo:
        print(DEMO_NOTE)
        _told_demo.add(shell)
    return magics


def unload(shell: Any, magics: AgentMagics) -> None:
    shell.events.unregister("post_run_cell", magics.refresh_views)
    shell.events.unregister("post_run_cell", magics.record_cell)
    magics.runs.withdraw_offers()
    atexit.unregister(magics.runtime.shutdown)
    try:
        magics.runtime.close()
    except NotebookError as exc:  # closed anyway: power mode's last sync failed
        print(exc)
    if magics.runtime.config in shell.configurables:
        shell.configurables.remove(magics.runtime.config)
