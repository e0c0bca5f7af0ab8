"""Contexts for tests of the OpenAI-compatible provider's HTTP side.

    provider.complete(verbatim(b'{"role":"user","content":"hi"}'), [])

`verbatim` makes a `Context` whose history the provider's encoding cache holds as the
given bytes, as they are: a test of the request body, the server's validation or its
answers sends exactly the messages it wrote, malformed ones included (a `content: null`
the agent never sends). The agent's own messages reach the wire through its context
projection (tests/test_agent_context*.py).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from tiny_agent_nb.provider import messages

C = TypeVar("C", bound=messages.HistoryCache)


class _Verbatim:
    """A `History` that feeds each cache the given bytes as a message's encoding."""

    def __init__(self, raw: tuple[bytes, ...]) -> None:
        self._raw = raw

    def cache(self, key: Hashable, make: Callable[[], C]) -> C:
        made = make()
        for encoded in self._raw:
            made.append(messages.User(encoded.decode()), encoded)
        return made


def verbatim(*raw: bytes) -> messages.Context:
    """A context whose messages the OpenAI-compatible provider sends as `raw`, verbatim."""
    return messages.Context(history=_Verbatim(raw))
