"""What the notebook says when the offline demo model answers: a banner once per kernel
(what the demo model is, and whether its commands are asked about first), and one label
line in each cell the demo model answers (its answer does not repeat it)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ..provider import DEMO_LABEL
from ._config import TinyAgent

DEMO_CELL_LABEL = f"[{DEMO_LABEL}]"

# Said once per kernel (a shell), after the cell that first loads the extension in demo
# mode: not again on a reload, `%agent new` or `%agent session`. Short lines: a terminal
# or a cell output wraps long ones mid-word.
DEMO_NOTE = f"""\
tiny-agent-nb: no API key and no base URL configured, so %%agent cells use the
  {DEMO_LABEL.upper()}. It runs the ```bash
  blocks of a prompt and reports what happened to each command.
  For a real model set OPENROUTER_API_KEY, or TinyAgent.base_url
  (env TINY_AGENT_BASE_URL) for a local OpenAI-compatible server."""
# What the banner says of a command's approval (TinyAgent.approve), by its value.
DEMO_APPROVAL = {
    "ask": '  It asks you before each command (TinyAgent.approve = "ask";\n'
    "  %%agent --approve auto runs them without asking).",
    "auto": '  It runs each command without asking (TinyAgent.approve = "auto").',
    "deny": '  It runs no command (TinyAgent.approve = "deny").',
}
# How each of the demo model's answers ends: the notebook's settings for a real model.
DEMO_ADVICE = (
    "For a real model set OPENROUTER_API_KEY, or point TinyAgent.base_url (env "
    "TINY_AGENT_BASE_URL) at a local OpenAI-compatible server."
)
_told_demo: weakref.WeakSet[Any] = weakref.WeakSet()


def demo_note_after(shell: Any, config: TinyAgent) -> Callable[..., None]:
    """A post_run_cell callback for the cell that loads the extension: the banner, said
    at the end of that cell and only if the demo model still answers then (a `%config
    TinyAgent.base_url = ...` or `api_key` after `%load_ext` in the same cell means no
    demo, and no banner). It unregisters itself."""

    def after_cell(*_: object) -> None:
        shell.events.unregister("post_run_cell", after_cell)
        if config.demo_mode() and shell not in _told_demo:
            print(f"{DEMO_NOTE}\n{DEMO_APPROVAL[config.approve]}")
            _told_demo.add(shell)

    return after_cell
