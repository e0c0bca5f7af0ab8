"""Failed requests -> `ProviderError`, translated once at the HTTP boundary.

    ProviderError(kind=...)
      http      the server answered with an error status, or an `error` object in a 200
      timeout   no connection / no byte within the configured timeout, or an answer
                still arriving after attempt_timeout                    (retryable)
      network   connection refused, reset, or closed mid-answer         (retryable)
      protocol  an answer that is not a chat completion (HTML, broken JSON, no choice),
                or one larger than max_response_bytes
      contextLength  the conversation does not fit the model's context window (each
                server's wording: `_window`); never retried as is: the loop compacts first

Every message says what happened and what to do next. None of them may contain the API
key or the credentials of the base URL: they quote `redacted_base_url`, and the client
scrubs each message once more before raising (a server may echo a secret).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from ..words import byte_size, shorten
from ._text import MESSAGE_LIMIT, encoded, get_path, parsed
from ._types import ProviderConfig, ProviderError
from ._window import context_too_long, is_context_length

if TYPE_CHECKING:  # loaded with the first real request: the offline demo never loads it
    import httpx

# bytes of an error body searched for the window's numbers (the quote is shorter)
ERROR_TEXT_LIMIT = 4096
# as the OpenAI SDK retries: timeouts, conflicts, rate limits, every 5xx (529: overloaded)
RETRYABLE_STATUS = frozenset({408, 409, 429})


def backoff_delay(
    attempt: int, retry_after: float | None, *, base: float = 1.0, cap: float = 30.0
) -> float:
    """Seconds to wait after attempt number `attempt` (1 = the first) failed.

    The server's `retry_after` wins when it gave one (it knows when it will accept us
    again); otherwise the wait doubles per attempt: base, 2*base, 4*base, ... Never more
    than `cap`, so a notebook cell never hangs for minutes on one step, never negative.
    """
    if retry_after is not None and math.isfinite(retry_after):
        delay = retry_after
    else:
        delay = base * 2.0 ** min(max(attempt, 1) - 1, 64)
    return min(max(delay, 0.0), cap)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """`Retry-After` as seconds from `now`: delta-seconds ("7", "1.5") or an HTTP date.
    None when absent or unreadable; a date in the past is 0."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000": RFC 9110 dates are GMT anyway
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def retry_after_of(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """`retry-after-ms` (OpenAI) is more precise than `Retry-After`; take it first."""
    millis = parse_retry_after(headers.get("retry-after-ms"), now=now)
    if millis is not None:
        return millis / 1000.0
    return parse_retry_after(headers.get("retry-after"), now=now)


def server_message(body: object) -> str | None:
    """The human message of an error body, in the shapes servers use:
    `{"error": {"message"}}` (OpenAI, OpenRouter, llama.cpp), `{"error": "..."}` (Ollama),
    `{"message"}` (vLLM), `{"detail"}` (FastAPI). OpenRouter's `metadata.raw` (the
    upstream provider's own words) is appended."""
    if not isinstance(body, Mapping):
        return None
    error = body.get("error")
    if isinstance(error, str) and error.strip():
        return shorten(error, MESSAGE_LIMIT)
    message = get_path(error, "message") if isinstance(error, Mapping) else None
    if not isinstance(message, str):
        message = body.get("message")
    if not isinstance(message, str):
        detail = body.get("detail")
        message = detail if isinstance(detail, str) else (encoded(detail) if detail else None)
    if not isinstance(message, str) or not message.strip():
        return None
    raw = get_path(error, "metadata", "raw")
    provider = get_path(error, "metadata", "provider_name")
    if isinstance(raw, str) and raw.strip() and raw not in message:
        message += f" ({provider}: {raw})" if isinstance(provider, str) else f" ({raw})"
    return shorten(message, MESSAGE_LIMIT)


def _error_status(error: Mapping[str, Any]) -> int | None:
    code = error.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
        return code
    if isinstance(code, str) and code.isdigit() and 100 <= int(code) <= 599:
        return int(code)
    return None


def error_in_body(body: Mapping[str, Any]) -> ProviderError:
    """An `error` object inside a 200 response or stream: the upstream provider failed."""
    error = body.get("error")
    status = _error_status(error) if isinstance(error, Mapping) else None
    retryable = status is None or status in (408, 429) or status >= 500
    text = server_message(body) or "no message"
    if is_context_length(error, text):  # OpenRouter: the upstream's 400 inside a 200
        return context_too_long(text, status, error)
    where = f" (code {status})" if status is not None else ""
    advice = "the request can be retried" if retryable else "fix the request before retrying"
    return ProviderError(
        f"The provider reported an error in its response{where}: {text}; {advice}.",
        kind="http",
        retryable=retryable,
        status=status,
    )


def _quoted(value: object, body: bytes, content_type: str) -> str:
    message = server_message(value)
    if message:
        return message
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        return "no message"
    if "html" in content_type or text.lstrip().startswith("<"):
        return "an HTML page, not an API error"
    return shorten(text, 200)


def status_error(
    config: ProviderConfig,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
) -> ProviderError:
    value = parsed(body)
    said = _quoted(value, body, headers.get("content-type", ""))
    where = config.redacted_base_url
    retry_after = retry_after_of(headers)

    def fail(message: str, *, retryable: bool = False) -> ProviderError:
        return ProviderError(
            message,
            kind="http",
            retryable=retryable,
            status=status,
            retry_after=retry_after if retryable else None,
        )

    if status in (401, 403):
        if config.api_key is None:
            return fail(
                f"{where} requires an API key and none is set (HTTP {status}: {said}). "
                f"Set {config.api_key_source} to a valid key."
            )
        return fail(
            f"{where} refused the API key (HTTP {status}: {said}). "
            f"Set {config.api_key_source} to a valid key."
        )
    if status == 402:
        return fail(
            f"No credits left for this request (HTTP 402: {said}). Add credits to the "
            "account (OpenRouter: https://openrouter.ai/settings/credits), lower max_tokens, "
            "or choose a free model."
        )
    if status == 404:
        return fail(
            f"Not found (HTTP 404: {said}). The model id {config.model!r} or the base URL "
            f"{where} is probably wrong: check both (a model id looks like "
            "'openai/gpt-4o-mini' on OpenRouter; the base URL ends before /chat/completions)."
        )
    # 500 too: a server may fail a prompt that does not fit as an internal error, and
    # retrying it would fail the same way every time.
    if status in (400, 413, 422, 500):
        error, text = None, body.decode("utf-8", errors="replace")
        if isinstance(value, Mapping):
            error, text = value.get("error", value), server_message(value) or ""
        if is_context_length(error, text):
            full = body[:ERROR_TEXT_LIMIT].decode("utf-8", errors="replace")
            return context_too_long(said, status, error, full=full)
    if status == 429:
        wait = f"after {retry_after:g}s" if retry_after is not None else "after a pause"
        return fail(f"Rate limited (HTTP 429: {said}); retry {wait}.", retryable=True)
    if status in RETRYABLE_STATUS or status >= 500:
        what = "is overloaded" if status in (503, 529) else "failed"
        return fail(
            f"The server {what} (HTTP {status}: {said}); the request can be retried.",
            retryable=True,
        )
    if 300 <= status < 400:
        return fail(
            f"{where} answered with a redirect (HTTP {status}); "
            "check the base URL (it should be the API root, e.g. .../api/v1)."
        )
    if status in (400, 413, 422):
        return fail(f"The server rejected the request (HTTP {status}): {said}")
    return fail(f"The request failed (HTTP {status}: {said}).")


def transport_error(config: ProviderConfig, exc: httpx.HTTPError) -> ProviderError:
    import httpx  # noqa: PLC0415 (loaded already: it raised `exc`)

    where = config.redacted_base_url
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return ProviderError(
            f"Could not connect to {where} within {config.connect_timeout:g}s; the request "
            "can be retried. Check the network and the base URL.",
            kind="timeout",
            retryable=True,
        )
    if isinstance(exc, httpx.TimeoutException):
        return ProviderError(
            f"{where} sent nothing for {config.read_timeout:g}s (read timeout); the request "
            "can be retried. A slow model may need a longer read_timeout.",
            kind="timeout",
            retryable=True,
        )
    if isinstance(exc, httpx.UnsupportedProtocol):
        return ProviderError(
            f"The base URL {where!r} is not an http(s) URL; set it to the API root, "
            "e.g. https://openrouter.ai/api/v1.",
            kind="network",
            retryable=False,
        )
    if isinstance(exc, httpx.ConnectError):
        return ProviderError(
            f"Could not connect to {where} ({type(exc).__name__}: {shorten(str(exc), 200)}); "
            "the request can be retried. Is the server running and the base URL right?",
            kind="network",
            retryable=True,
        )
    if isinstance(exc, httpx.DecodingError):
        return ProviderError(
            f"{where} sent a body that could not be decoded ({shorten(str(exc), 200)}); "
            "the request can be retried.",
            kind="protocol",
            retryable=True,
        )
    if isinstance(exc, httpx.LocalProtocolError):
        return ProviderError(
            f"The request could not be sent to {where} ({shorten(str(exc), 200)}).",
            kind="protocol",
            retryable=False,
        )
    return ProviderError(
        f"The connection to {where} broke before the answer was complete "
        f"({type(exc).__name__}); the request can be retried.",
        kind="network",
        retryable=True,
    )


def ended_early(config: ProviderConfig) -> ProviderError:
    return ProviderError(
        f"The stream from {config.redacted_base_url} ended before the answer was "
        "complete (no finish_reason, no [DONE]); the request can be retried.",
        kind="network",
        retryable=True,
    )


def empty_stream(config: ProviderConfig) -> ProviderError:
    # llama-cpp-python answers a streamed request past its window with 200 and no event
    # (its error goes to its log only); the same request without streaming gets the 400
    # that says why, so the loop asks that way next instead of retrying blindly.
    return ProviderError(
        f"The streamed answer from {config.redacted_base_url} ended with no event at all "
        "(the server failed after answering 200); asked again without streaming, the "
        "server says why.",
        kind="protocol",
        retryable=True,
        empty_stream=True,
    )


def not_an_answer(config: ProviderConfig, what: str, *, retryable: bool) -> ProviderError:
    hint = (
        "the request can be retried"
        if retryable
        else "check that the base URL is the API root of an OpenAI-compatible server"
    )
    return ProviderError(
        f"{config.redacted_base_url} did not answer with a chat completion ({what}); {hint}.",
        kind="protocol",
        retryable=retryable,
    )


def too_large(config: ProviderConfig) -> ProviderError:
    # Not retried: the same question most likely gets the same endless answer again.
    return ProviderError(
        f"{config.redacted_base_url} sent more than {byte_size(config.max_response_bytes)} for "
        "one answer, so it was cut off and none of it was kept (the model may be stuck "
        "repeating itself). Ask for a shorter answer (max_tokens), or raise "
        "max_response_bytes if answers this long are expected.",
        kind="protocol",
        retryable=False,
    )


def undecodable(config: ProviderConfig, exc: Exception) -> ProviderError:
    what = (
        f"in an encoding this client does not decode ({exc})"
        if isinstance(exc, ValueError)
        else "compressed, but its bytes do not decompress"
    )
    return ProviderError(
        f"{config.redacted_base_url} sent its answer {what}; none of it was kept. This "
        "client asks for gzip or deflate only: check a proxy between it and the server.",
        kind="protocol",
        retryable=False,
    )


def attempt_timed_out(config: ProviderConfig) -> ProviderError:
    return ProviderError(
        f"{config.redacted_base_url} was still answering after "
        f"{config.attempt_timeout:g}s, so the answer was cut off and none of it was kept "
        "(a server that trickles or only sends keep-alives); the request can be retried. "
        "Raise attempt_timeout if a slow model needs longer.",
        kind="timeout",
        retryable=True,
    )
