"""OpenAI-compatible chat-completions provider over httpx (OpenRouter by default).

    with Provider(ProviderConfig(model="openai/gpt-4o-mini", api_key=key)) as provider:
        completion = provider.complete(context, tools, on_event=show)

The agent hands a provider provider-neutral messages (`messages.Context`); each provider
encodes them in its own wire format (this one: `wire`), afresh for each request. One
`complete` is one HTTP request (one stepAttempt);
failures raise `ProviderError` whose `retryable`/`retry_after` feed `backoff_delay` in
the agent loop.
"""

import typing as _typing

from . import _messages as messages
from . import _wire as wire
from ._body import ACCEPT_ENCODING, BodyDecoder, UnsupportedEncoding
from ._demo import DEMO_LABEL, DEMO_MODEL, DEMO_PROVIDER, DemoProvider
from ._errors import backoff_delay
from ._types import (
    ATTEMPT_TIMEOUT,
    MAX_RESPONSE_BYTES,
    OPENROUTER_BASE_URL,
    READ_TIMEOUT,
    Completion,
    ProviderConfig,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallStarted,
    UsageReport,
    Waiting,
)
from ._window import METADATA_SECONDS, plausible_window

if _typing.TYPE_CHECKING:  # what __getattr__ gives, for type checkers
    from ._client import Provider, http_client


def __getattr__(name: str) -> object:
    # perf: register row "lazy-imports" (docs/benchmarks.md).
    # httpx loads with the first real request's `Provider`: a kernel on the offline demo
    # model never imports it (nor pays its import time).
    if name in ("Provider", "http_client"):
        from . import _client  # noqa: PLC0415

        return getattr(_client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACCEPT_ENCODING",
    "ATTEMPT_TIMEOUT",
    "DEMO_LABEL",
    "DEMO_MODEL",
    "DEMO_PROVIDER",
    "MAX_RESPONSE_BYTES",
    "METADATA_SECONDS",
    "OPENROUTER_BASE_URL",
    "READ_TIMEOUT",
    "BodyDecoder",
    "Completion",
    "DemoProvider",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "ReasoningDelta",
    "StreamEvent",
    "TextDelta",
    "ToolCallStarted",
    "UnsupportedEncoding",
    "UsageReport",
    "Waiting",
    "backoff_delay",
    "http_client",
    "messages",
    "plausible_window",
    "wire",
]
