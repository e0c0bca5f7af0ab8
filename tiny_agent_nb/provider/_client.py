"""`Provider`: one `complete` call = one HTTP POST to `{base_url}/chat/completions`.

The request body is the context encoded afresh (`_wire`). The answer is read as SSE or JSON,
whichever the server actually sent (`_answer`), and normalized by `_normalize`. Every
failure leaves as one `ProviderError`; nothing else escapes except `KeyboardInterrupt`
(and other `BaseException`s), which close the response on the way out.
"""

from __future__ import annotations

import logging
import re
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING

import httpx

from .._version import __version__
from ..redaction import redact, redact_url, url_secrets
from ._answer import EventSink, read_answer
from ._body import ACCEPT_ENCODING, UnsupportedEncoding, decoded
from ._deadline import bind_deadlines, within
from ._errors import (
    attempt_timed_out,
    status_error,
    too_large,
    transport_error,
    undecodable,
)
from ._messages import Context
from ._normalize import CompletionAssembler
from ._types import Completion, ProviderConfig, ProviderError, StreamEvent, Waiting
from ._urls import redact_httpx_logs, request_target
from ._window import METADATA_SECONDS, window_in_listing, window_in_props, window_in_ps
from ._wire import request_body

if TYPE_CHECKING:
    from ..tools import ToolSchema

log = logging.getLogger(__name__)

ERROR_BODY_LIMIT = 64 * 1024  # bytes of an error response read for its message
_HEADER_SAFE = re.compile(r"^[\x20-\x7e]*$")  # what h11 sends without quoting the value

Clock = Callable[[], float]  # seconds, monotonic


def _ignore(event: StreamEvent) -> None:
    pass


def http_client(transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """The HTTP client requests go through. One can serve many `Provider`s (a notebook
    keeps one per session, so its cells reuse one keep-alive connection); each request
    carries its provider's own timeouts, deadline and headers."""
    client = httpx.Client(
        transport=transport,
        follow_redirects=False,
        headers={"user-agent": f"tiny-agent-nb/{__version__}"},
    )
    bind_deadlines(client)
    return client


class Provider:
    """An OpenAI-compatible chat-completions endpoint (OpenRouter, vLLM, llama.cpp,
    Ollama, ...). Tests inject an `httpx` transport and a clock instead of patching.

    `client`: an `http_client()` the caller keeps and closes (shared across providers);
    without one the provider makes its own and `close()` closes it."""

    def __init__(
        self,
        config: ProviderConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        client: httpx.Client | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        if client is not None and transport is not None:
            raise ValueError("give the transport to http_client(), not beside a client")
        self._config = config
        self._clock = clock
        headers = {str(k).lower(): str(v) for k, v in config.extra_headers.items()}
        key = (config.api_key or "").strip() or None  # an empty variable means "no key"
        if key is not None:
            # Checked here because h11 quotes a header it refuses in its error message.
            if not _HEADER_SAFE.match(key) or " " in key:
                raise ValueError(
                    f"The API key from {config.api_key_source} holds characters an HTTP "
                    "header cannot carry (a stray quote, space or line break?)."
                )
            headers["authorization"] = f"Bearer {key}"
        for name, value in headers.items():
            if not _HEADER_SAFE.match(value):
                raise ValueError(f"The value of header {name!r} cannot be sent over HTTP.")
        self._headers = headers
        # Secrets scrubbed from every message we raise (a server may echo them back).
        others = (v for k, v in headers.items() if k != "authorization" and len(v) >= 8)
        in_url = list(url_secrets(config.base_url))
        try:
            target, basic = request_target(config.base_url)
        except httpx.InvalidURL:
            target, basic = None, None  # reported by `complete`, where it can be recorded
        if basic is not None:  # base64 of "user:password" is the password in disguise
            in_url.append(basic.removeprefix("Basic "))
        self._secrets = tuple(s for s in (key, config.api_key, *others, *in_url) if s)
        if in_url:
            redact_httpx_logs()
        self._shown_url = redact_url(str(target)) if target else config.redacted_base_url
        self._timeout = httpx.Timeout(
            connect=config.connect_timeout,
            read=config.read_timeout,
            write=config.read_timeout,
            pool=config.connect_timeout,
        )
        self._owns_client = client is None
        self._client = http_client(transport) if client is None else client
        self._windows: dict[str, int | None] = {}  # model -> what GET /models said

    @property
    def config(self) -> ProviderConfig:
        return self._config

    def __repr__(self) -> str:
        config = self._config
        return f"Provider(model={config.model!r}, base_url={config.redacted_base_url!r})"

    def __enter__(self) -> Provider:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_client:  # a shared client is its owner's to close
            self._client.close()

    def complete(
        self,
        context: Context,
        tools: Sequence[ToolSchema],
        *,
        on_event: EventSink | None = None,
        stream: bool | None = None,
    ) -> Completion:
        """Ask once. Stream events go to `on_event` as they arrive (and `Waiting` each
        second the server sends nothing); the settled answer is returned. Raises
        `ProviderError` (see `_errors`) for anything else. `stream` overrides the
        configuration's for this one request (after an empty stream)."""
        config = self._config if stream is None else replace(self._config, stream=stream)
        body = request_body(config, context, tools)
        log.debug("POST %s: %d tools, stream=%s", self._shown_url, len(tools), config.stream)
        assembler = CompletionAssembler()
        try:
            completion = self._post(body, on_event, assembler)
        except ProviderError as exc:
            self._scrub(exc)
            # Usage the answer reported before it failed was billed: it goes with the error.
            exc.usage = exc.usage or assembler.usage
            log.debug("request failed: %s (kind=%s, status=%s)", exc.message, exc.kind, exc.status)
            raise
        log.debug("answered: finish=%s usage=%s", completion.message.finishReason, completion.usage)
        return completion

    def context_window(self, model: str | None = None) -> int | None:
        """The context window (tokens) of `model` (this provider's by default) as the
        server's metadata states it: `GET {base_url}/models`, then llama.cpp's `/props`
        and Ollama's `/api/ps` beside it (`_window` says where each server puts it); None
        when none says it or none could be read. Asked once per model and provider, all
        its answers within METADATA_SECONDS (or `read_timeout`, when shorter) and the
        limits of an answer; never raises."""
        model = self._config.model if model is None else model
        if model not in self._windows:
            self._windows[model] = self._served_window(model)
        return self._windows[model]

    # ------------------------------------------------------------------ internals

    def _scrub(self, exc: ProviderError) -> None:
        exc.message = self._scrubbed(exc.message)
        exc.args = (exc.message,)
        # The httpx error it was raised from is printed in its traceback, and carries the
        # URL (query credentials included) or a server's words.
        cause, seen = exc.__cause__ or exc.__context__, set()
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            cause.args = tuple(self._scrubbed(a) if isinstance(a, str) else a for a in cause.args)
            cause = cause.__cause__ or cause.__context__

    def _scrubbed(self, text: str) -> str:
        return redact(text, self._secrets)

    @contextmanager
    def _exchange(
        self,
        method: str,
        base: str,
        endpoint: str,
        deadline: float,
        timeout: httpx.Timeout,
        *,
        body: bytes | None = None,
        waiting: Callable[[], None] | None = None,
    ) -> Iterator[tuple[httpx.Response, Iterator[bytes]]]:
        """One request to `endpoint` under `base`, and its body's chunks: decoded, and
        bounded by `max_response_bytes` and `deadline`. Raises httpx's errors."""
        headers = {"accept": "application/json", "accept-encoding": ACCEPT_ENCODING}
        if body is not None:
            headers["content-type"] = "application/json"
        headers.update(self._headers)
        url, basic = request_target(base, endpoint)
        if basic is not None:  # as httpx would from the URL (it replaces a Bearer key)
            headers["authorization"] = basic
        with (
            within(lambda: deadline - self._clock(), waiting),
            self._client.stream(
                method, url, content=body, headers=headers, timeout=timeout
            ) as response,
        ):
            raw = decoded(response.iter_raw(), response.headers.get("content-encoding", ""))
            yield response, self._metered(raw, deadline)

    def _post(
        self, body: bytes, on_event: EventSink | None, assembler: CompletionAssembler
    ) -> Completion:
        sent = self._clock()
        deadline = sent + self._config.attempt_timeout
        # Whoever follows the events hears of each silence of the server (`Waiting`).
        waiting = None if on_event is None else lambda: on_event(Waiting(self._clock() - sent))
        base = self._config.base_url
        try:
            with self._exchange(
                "POST",
                base,
                "/chat/completions",
                deadline,
                self._timeout,
                body=body,
                waiting=waiting,
            ) as (response, chunks):
                if not response.is_success:
                    raw = _read_limited(chunks, ERROR_BODY_LIMIT)
                    raise status_error(self._config, response.status_code, response.headers, raw)
                try:
                    completion = read_answer(
                        self._config, response.headers, chunks, on_event or _ignore, assembler
                    )
                except ProviderError as error:
                    if error.empty_stream:
                        _discard_connection(response)
                    raise
                _drain(chunks)
                return completion
        except (UnsupportedEncoding, zlib.error) as exc:
            raise undecodable(self._config, exc) from None
        except httpx.InvalidURL as exc:
            raise ProviderError(
                f"The base URL {self._config.redacted_base_url!r} is not a valid URL "
                f"({self._scrubbed(str(exc))}); set the base URL to the API root, "
                "e.g. https://openrouter.ai/api/v1.",
                kind="network",
                retryable=False,
            ) from None  # its message may quote the URL, credentials and all
        except httpx.HTTPError as exc:
            if isinstance(exc, httpx.TimeoutException) and self._clock() >= deadline:
                raise attempt_timed_out(self._config) from exc
            raise transport_error(self._config, exc) from exc

    def _served_window(self, model: str) -> int | None:
        # One deadline for every answer: a window is only a hint, and a server that never
        # answers its metadata must not hold the first cell for one read_timeout each.
        deadline = self._clock() + min(METADATA_SECONDS, self._config.read_timeout)
        listed = window_in_listing(self._get("/models", deadline), model)
        if listed is not None and not listed.trained:
            return listed.window
        # Beside an API root ending in /v1 (a local server's): llama.cpp's and Ollama's
        # own endpoints, which state the window they serve.
        if self._config.base_url.rstrip("/").endswith("/v1"):
            served = window_in_props(self._get("/props", deadline, beside=True))
            if served is None:
                served = window_in_ps(self._get("/api/ps", deadline, beside=True), model)
            if served is not None:
                return served
        return listed.window if listed is not None else None

    def _get(self, endpoint: str, deadline: float, *, beside: bool = False) -> bytes:
        """The body of `GET endpoint` under the base URL (`beside`: under its parent, the
        server's root when the base URL ends in /v1), read by `deadline`; b"" when it
        fails in any way, or the deadline has passed."""
        left = deadline - self._clock()
        if left <= 0:
            log.debug("GET %s: not asked, no time left for the metadata", endpoint)
            return b""
        base = self._config.base_url
        if beside:
            head, _, query = base.partition("?")
            base = head.rstrip("/").removesuffix("/v1") + (f"?{query}" if query else "")
        try:
            with self._exchange("GET", base, endpoint, deadline, httpx.Timeout(left)) as (
                got,
                chunks,
            ):
                if not got.is_success:
                    # Read (bounded) all the same: an unread answer costs the connection,
                    # which the cells' requests reuse.
                    _drain(chunks)
                    log.debug("GET %s: HTTP %d, no context window", endpoint, got.status_code)
                    return b""
                return b"".join(chunks)
        except Exception as exc:  # a window is only a hint: None is "not reported"
            log.debug("GET %s failed: %s", endpoint, self._scrubbed(f"{type(exc).__name__}: {exc}"))
            return b""

    def _metered(self, chunks: Iterator[bytes], deadline: float) -> Iterator[bytes]:
        """`chunks`, cut off once the answer passes `max_response_bytes` or `deadline`
        (between the reads `_deadline` bounds)."""
        limit, total = self._config.max_response_bytes, 0
        for chunk in chunks:
            total += len(chunk)
            if total > limit:
                raise too_large(self._config)
            if self._clock() > deadline:
                raise attempt_timed_out(self._config)
            yield chunk


def _discard_connection(response: httpx.Response) -> None:
    """Keep the connection of a stream that ended with no event out of the pool.

    llama-cpp-python closes it a moment after such a stream; the same request, asked again
    without streaming at once, would go out on it and fail "disconnected" before the
    server could say why. A closed socket is one the pool replaces."""
    stream = response.extensions.get("network_stream")
    if stream is not None:
        stream.close()


def _drain(chunks: Iterator[bytes]) -> None:
    """Read what follows a complete answer (the end of a chunked stream after `[DONE]`),
    so the connection goes back to the pool and the next request reuses it. Still bound
    by the attempt's limits; a failure here costs only the connection, not the answer."""
    try:
        for _ in chunks:
            pass
    except (ProviderError, httpx.HTTPError):
        pass


def _read_limited(chunks: Iterator[bytes], limit: int) -> bytes:
    out = bytearray()
    for chunk in chunks:
        out += chunk
        if len(out) >= limit:
            break
    return bytes(out[:limit])
