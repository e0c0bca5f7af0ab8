"""Contexts for tests of the OpenAI-compatible provider's HTTP side.

    provider.complete(verbatim(b'{"role":"user","content":"hi"}'), [])

`verbatim` makes a `Context` whose history holds the given bytes, as they are: a test of
the request body, the server's validation or its answers sends exactly the messages it
wrote, malformed ones included (a `content: null` the agent never sends). The agent's
own messages reach the wire through its context projection (tests/test_agent_context*.py).
"""

from __future__ import annotations

from tiny_agent_nb.provider import messages


def verbatim(*raw: bytes) -> messages.Context:
    """A context whose messages the OpenAI-compatible provider sends as `raw`, verbatim."""
    return messages.Context(history=raw)
