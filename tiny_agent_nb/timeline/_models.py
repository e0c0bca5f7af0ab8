"""Which models a session's runs used: its `stepAttempt` records say, not its header.

The header's `provider` and `model` are what was configured when the file was created
(docs/session-format.md §1). A notebook configured the documented way (`%load_ext`, then `%config
TinyAgent.model = ...`) creates its session before its model is configured, so its header
names the offline demo model that no run ever asked. Every surface that names the
session's model (the timeline, `%agent status`, `tiny-agent-nb inspect`) says this.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..session import SessionState

NAMED_EARLIER = 3  # earlier models named beside the latest; the rest are counted


@dataclass(frozen=True)
class ModelName:
    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider} / {self.model}"


@dataclass(frozen=True)
class SessionModels:
    used: tuple[ModelName, ...]  # the models its attempts asked, the latest asked first
    configured: ModelName  # the header's: configured when the file was created

    @property
    def providers(self) -> frozenset[str]:
        """The providers that answered; a session no model was asked in yet: the one
        configured when it was created (what its first run would have asked then)."""
        return frozenset(m.provider for m in self.used) or frozenset({self.configured.provider})

    def described(self) -> str:
        """`openai-compatible / gpt-4o`, with the earlier models when there were several."""
        if not self.used:
            return f"{self.configured} (configured when the session was created; none asked yet)"
        latest, *earlier = self.used
        if not earlier:
            return str(latest)
        named = ", ".join(str(m) for m in earlier[:NAMED_EARLIER])
        more = len(earlier) - NAMED_EARLIER
        return f"{latest} (latest of {len(self.used)} models; also {named}" + (
            f" and {more} more)" if more > 0 else ")"
        )


def session_models(state: SessionState) -> SessionModels:
    used = dict.fromkeys(ModelName(a.provider, a.model) for a in state.attempts_newest_first())
    header = state.header
    return SessionModels(tuple(used), ModelName(header.provider, header.model))
