"""What the agent loop and a provider exchange. No HTTP here.

The loop hands the provider provider-neutral messages (`messages.Context`) and tool
schemas; one `Provider.complete` call is one physical HTTP request, i.e. one
`stepAttempt`, and returns a `Completion` or raises `ProviderError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .._exceptions import TinyAgentError
from ..redaction import redact_url
from ..session import AssistantMessage

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
# A long reasoning answer (64k tokens) streams as ~64k SSE events of 200-350 bytes each,
# about 22 MB: 64 MiB leaves room for twice that and still bounds the kernel's memory.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# 64k tokens at ~40 tokens/s take ~27 minutes; an attempt still going after 30 is a server
# that trickles or pings without end, and the cell must not hang on it forever.
ATTEMPT_TIMEOUT = 1800.0
# Seconds to wait for the next byte of a response (TinyAgent.request_timeout's default).
READ_TIMEOUT = 120.0


@dataclass(frozen=True)
class ProviderConfig:
    """Where and how to ask. The API key, extra headers and credentials in the base URL
    never reach a repr, a digest, a log line or the session file: everything but the
    request sees `redacted_base_url`."""

    model: str
    base_url: str = field(default=OPENROUTER_BASE_URL, repr=False)
    provider: str = "openrouter"  # label written to the header and to each stepAttempt
    api_key: str | None = field(default=None, repr=False)
    api_key_source: str = "TINY_AGENT_API_KEY"  # named in error messages, never the value
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stream: bool = True
    connect_timeout: float = 10.0
    read_timeout: float = READ_TIMEOUT  # between two bytes of the response, not the whole answer
    # Bounds on one attempt (one request), so an endless or trickling answer cannot hold
    # the kernel or its memory forever: bytes of the body, seconds from request to last byte.
    max_response_bytes: int = MAX_RESPONSE_BYTES
    attempt_timeout: float = ATTEMPT_TIMEOUT
    extra_headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"ProviderConfig({shown}, base_url={self.redacted_base_url!r})"

    @property
    def redacted_base_url(self) -> str:
        """The base URL as it may be shown or stored: no trailing slash, credentials masked."""
        return redact_url(self.base_url.rstrip("/"))

    @property
    def window_key(self) -> tuple[str, str]:
        """What a learned context window is kept under (docs/spec.md §8): the server (its
        credentials masked) and the model."""
        return (self.redacted_base_url, self.model)

    def sampling(self) -> dict[str, Any]:
        params = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        return {k: v for k, v in params.items() if v is not None}

    def digest_material(self) -> dict[str, Any]:
        """What `configurationDigest` covers from the provider side: no secrets."""
        return {
            "provider": self.provider,
            "baseUrl": self.redacted_base_url,
            "model": self.model,
            "sampling": self.sampling(),
        }


@dataclass(frozen=True)
class UsageReport:
    """Usage of one physical request as the server reported it (None: not reported)."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    cost: float | None = None


@dataclass(frozen=True)
class Completion:
    message: AssistantMessage
    usage: UsageReport | None  # None when the server sent no usage at all: unknown, not 0
    model: str | None = None  # the model id the server says answered, if it says
    response_id: str | None = None  # the server's id of this answer (OpenRouter: "gen-...")


# ---------------------------------------------------------------- streaming events


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStarted:
    """A tool call's name has arrived (its arguments are still streaming). `index` is the
    call's position in the settled `message.toolCalls`; `id` is the one it settles with
    (made up as `call_<hex>` when the server sends none)."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class Waiting:
    """The server has sent nothing for a while (`_deadline.WAIT_EVERY`, again after each
    such silence): `seconds` since the request was sent. Told on the requesting thread."""

    seconds: float


StreamEvent = TextDelta | ReasoningDelta | ToolCallStarted | Waiting


# ---------------------------------------------------------------- errors

# What each kind means is drawn in `_errors`' docstring.
ErrorKind = Literal["http", "timeout", "network", "protocol", "contextLength"]


class ProviderError(TinyAgentError):
    """A request that produced no usable answer.

    `retryable` errors (429, 5xx, timeouts, dropped connections) are retried by the loop as
    new attempts after `retry_after` seconds when the server said so. Others (400, 401, 402,
    404, ...) fail the operation; `message` says what to do next. `usage` is what the
    server reported before the answer failed (a stream that sent its usage, then broke):
    those tokens were billed, so the loop keeps them with the failure (docs/spec.md §4).

    A `contextLength` error carries the `window` and the input tokens of the refused
    request as the server counted them (`prompt_tokens`) when its words state them;
    `empty_stream` marks a streamed answer that ended with no event at all (a server
    that failed after answering 200, as llama-cpp-python does past its window): asked
    again without streaming, the server says why.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
        usage: UsageReport | None = None,
        window: int | None = None,
        prompt_tokens: int | None = None,
        empty_stream: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind: ErrorKind = kind
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.usage = usage
        self.window = window
        self.prompt_tokens = prompt_tokens
        self.empty_stream = empty_stream

    def __repr__(self) -> str:
        return f"ProviderError({self.message!r}, kind={self.kind!r}, status={self.status!r})"
