"""Loading the extension into a shell (`%load_ext tiny_agent_nb`) and unloading it: the
kernel's runtime, its magics, and the session of the notebook, found (or followed, when the
notebook was renamed, moved or duplicated) and opened."""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Any

from ._bridge import LiveNotebook
from ._config import TinyAgent
from ._display import cell_proposer
from ._links import follow_notebook, resolve_session_path
from ._magics import AgentMagics
from ._opening import NotebookError
from ._provider import demo_note_after
from ._runtime import NotebookRuntime


def load(shell: Any) -> AgentMagics:
    config = TinyAgent(parent=shell)
    if config not in shell.configurables:
        shell.configurables.append(config)

    def saved_notebook() -> Path | None:
        """The notebook's file, as the session was found by it: read when no frontend
        answers with the live notebook."""
        return runtime.location.notebook if runtime.location else None

    runtime = NotebookRuntime(
        config,
        shell.user_ns,
        hidden_variables=shell.user_ns_hidden,
        propose_cell=cell_proposer(shell, config.secrets),
        notebook=LiveNotebook(shell, saved_notebook),
    )
    # A kernel that exits without `%unload_ext` closes the session (its HTTP client and
    # its lock) too, leaving its displays as they are.
    atexit.register(runtime.shutdown)
    magics = AgentMagics(shell, runtime)
    shell.register_magics(magics)
    shell.events.register("pre_run_cell", magics.replays.note_cell)
    shell.events.register("post_run_cell", magics.refresh_views)
    shell.events.register("post_run_cell", magics.record_cell)
    location = resolve_session_path(
        explicit=config.session_path, environ=os.environ, user_ns=shell.user_ns, cwd=Path.cwd()
    )
    moved = follow_notebook(location, Path.cwd())
    if moved is not None:
        print(moved)
    try:
        magics.show_report(runtime.open(location))
    except NotebookError as exc:
        print(exc)
    # Not in a session a real model worked on: its report says how to configure that one.
    if not runtime.session_model.real:
        shell.events.register("post_run_cell", demo_note_after(shell, config))
    return magics


def unload(shell: Any, magics: AgentMagics) -> None:
    shell.events.unregister("pre_run_cell", magics.replays.note_cell)
    shell.events.unregister("post_run_cell", magics.refresh_views)
    shell.events.unregister("post_run_cell", magics.record_cell)
    magics.runs.shutdown.close()
    magics.runs.withdraw_offers()
    if isinstance(magics.runtime.loops.notebook, LiveNotebook):
        magics.runtime.loops.notebook.close()
    atexit.unregister(magics.runtime.shutdown)
    try:
        magics.runtime.close()
    except NotebookError as exc:  # closed anyway: power mode's last sync failed
        print(exc)
    if magics.runtime.config in shell.configurables:
        shell.configurables.remove(magics.runtime.config)
