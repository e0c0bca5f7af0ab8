"""The model's context window as a run knows it (docs/spec.md §4, §8): configured, else
learned by the session for this model at this server (`contextWindow`: its metadata or
its refusal of a request too long), else listed by its metadata now, else the default.

Sizes are estimated from bytes, calibrated by the server's count of the previous request
(a tokenizer that makes 3 bytes a token would overflow a window the 4-byte rule says is
25% free). A count far below the bytes suggests a server that cut the prompt (Ollama does
without an error); only suggests, since a server that counts only what its cache did not
hold gives the same counts, so a count is never taken for a window.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..provider import plausible_window
from ..session import (
    LearnedWindow,
    NewFact,
    SessionState,
    SessionStore,
    WindowSource,
)
from ..session import facts as f

# When neither the trait nor the server says how big the model's window is: small enough
# for most models served today (local ones included), so compaction comes early, not late.
DEFAULT_CONTEXT_WINDOW = 32_768
# Tokens per byte of a request: never fewer than the 4-bytes-a-token rule (English prose;
# a tokenizer that does better only makes the estimate safe), never more than one a byte.
MIN_TOKENS_PER_BYTE = 0.25
MAX_TOKENS_PER_BYTE = 1.0
# No tokenizer makes 16 bytes of a conversation one token: a count that low, or that grew
# that little since the previous request of the same context, is a prompt the server cut.
TRUNCATED_BYTES_PER_TOKEN = 16
TRUNCATION_GROWTH_BYTES = 64  # bytes a context must grow by before its growth is judged

WindowOrigin = WindowSource | str  # a record's source, or "configured" / "default"


@dataclass(frozen=True)
class Measure:
    """A request's input tokens as the server counted them, and the bytes of its messages."""

    tokens: int
    bytes: int


def truncated(sent: Measure, previous: Measure | None) -> bool:
    """Whether the server's count of `sent` suggests it read only part of it: fewer than one
    token per 16 bytes, or grown by less than that since `previous` (the last request of
    the same context). Only a count that could be a window is judged."""
    if plausible_window(sent.tokens) is None:
        return False
    if sent.tokens * TRUNCATED_BYTES_PER_TOKEN < sent.bytes:
        return True
    if previous is None:
        return False
    grown = sent.bytes - previous.bytes
    added = sent.tokens - previous.tokens
    return grown >= TRUNCATION_GROWTH_BYTES and added * TRUNCATED_BYTES_PER_TOKEN < grown


def largest_count(state: SessionState, model: str) -> int:
    """The most input tokens a server counted for one request of `model` in the session.

    A server that cuts a prompt reads its whole window: a count below this one is no cut
    but a server that counts only what its cache did not hold (Ollama 0.30 did:
    ollama/ollama#16414, #16428)."""
    usage = state.usage
    counts = (
        found.inputTokens
        for attempt in state.attempts.values()
        if attempt.model == model and (found := usage.get(attempt.id)) is not None
    )
    return max(counts, default=0)


class RunWindow:
    """The window of one loop's model at its server, and the calibration of its estimates.
    `key`: (base URL, credentials masked; model); None (the offline demo) learns nothing."""

    def __init__(
        self,
        store: SessionStore,
        *,
        configured: int | None,
        key: tuple[str, str] | None,
        listed: int | None = None,
    ) -> None:
        self._store = store
        self.configured = configured
        self.key = key
        self.learned: LearnedWindow | None = None
        if key is not None:
            self.learned = store.learned_window(*key)
        self._listed = plausible_window(listed) if self.learned is None else None
        self.tokens_per_byte = MIN_TOKENS_PER_BYTE

    @property
    def tokens(self) -> int:
        if self.configured:
            return self.configured
        if self.learned is not None and self.learned.tokens is not None:
            return self.learned.tokens  # never None: `context_windows` holds believed ones
        return self._listed or DEFAULT_CONTEXT_WINDOW

    @property
    def origin(self) -> WindowOrigin:
        if self.configured:
            return "configured"
        if self.learned is not None:
            return self.learned.source
        return "listing" if self._listed else "default"

    def describe(self) -> str:
        return f"{self.tokens} tokens, {describe_origin(self.origin)}"

    def record_listing(self) -> None:
        """Commit the window the server's metadata stated, once: no later process asks."""
        if self.key is None or self.learned is not None or not self._listed:
            return
        base_url, model = self.key
        window = f.ContextWindow(
            baseUrl=base_url, model=model, tokens=self._listed, source="listing"
        )
        listing = [f.NewFact(window)]
        self._store.commit(listing)
        self.learned_from(listing)

    def learning(self, tokens: int | None, attempt_id: str) -> list[NewFact]:
        """The record of the window a server's refusal stated, if believable and new: the
        caller commits it with the attempt's failure, then calls `learned_from`."""
        tokens = plausible_window(tokens)
        if self.key is None or tokens is None:
            return []
        if self.learned is not None and self.learned.tokens == tokens:
            return []
        base_url, model = self.key
        window = f.ContextWindow(
            baseUrl=base_url, model=model, tokens=tokens, source="refusal", attemptId=attempt_id
        )
        return [f.NewFact(window)]

    def learned_from(self, committed: list[NewFact]) -> None:
        if self.key is not None and committed:
            self.learned = self._store.learned_window(*self.key)

    def calibrate(self, measure: Measure | None) -> None:
        """Take the tokens per byte of a request the server counted, when more than the
        estimate uses: it errs on the large side (each loop calibrates afresh)."""
        if measure is None or measure.bytes <= 0 or plausible_window(measure.tokens) is None:
            return
        ratio = min(MAX_TOKENS_PER_BYTE, measure.tokens / measure.bytes)
        self.tokens_per_byte = max(self.tokens_per_byte, ratio)

    def estimate(self, byte_count: int) -> int:
        return int(byte_count * self.tokens_per_byte + 0.999)


def describe_origin(origin: WindowOrigin) -> str:
    return {
        "configured": "as configured",  # the notebook names its trait in its own words
        "listing": "as the server's metadata states it",
        "refusal": "as the server said when it refused a request too long",
        "default": "the default: the server states none",
    }.get(origin, origin)
