"""tiny-agent-nb: durable agent notebooks.

`%load_ext tiny_agent_nb` will register the `%%agent` magics (the notebook layer lands in
a later issue). The session store lives in `tiny_agent_nb.session`.
"""

__version__ = "0.1.0.dev0"

__all__ = ["__version__"]
