"""tiny-agent-nb: durable agent notebooks.

    %load_ext tiny_agent_nb
    %%agent
    Find why tests/test_parse.py fails and fix it.

The session store is `tiny_agent_nb.session`; the loop `tiny_agent_nb.agent`.
"""

from __future__ import annotations

import logging
from typing import Any

from ._exceptions import TinyAgentError
from ._version import __version__

# A library's loggers stay silent unless the application configures logging: a run's
# failure is shown in the cell (escaped), not as Python's last-resort stderr line
# carrying an unescaped exception message.
logging.getLogger("tiny_agent_nb").addHandler(logging.NullHandler())

__all__ = [
    "TinyAgentError",
    "__version__",
    "load_ipython_extension",
    "unload_ipython_extension",
]

_loaded: dict[int, Any] = {}


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext tiny_agent_nb`: register the magics, open this notebook's session."""
    # Imported here: IPython is needed only inside a shell (perf: register row "lazy-imports").
    from .notebook import load  # noqa: PLC0415

    if id(ipython) in _loaded:
        return
    _loaded[id(ipython)] = load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .notebook import unload  # noqa: PLC0415

    magics = _loaded.pop(id(ipython), None)
    if magics is not None:
        unload(ipython, magics)
