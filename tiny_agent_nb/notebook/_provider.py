"""The kernel's way to the model: the provider configuration read from `TinyAgent`, one
HTTP client per open session (every cell reuses its keep-alive connection), the context
window each server lists for a model (asked once per kernel), and the early refusal of
a run that cannot succeed (nothing committed, nothing sent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..provider import ProviderConfig
from ..render import cell_text
from ._config import TinyAgent, is_openrouter
from ._opening import NotebookError

if TYPE_CHECKING:  # httpx is imported only when a real model is asked (not by the demo)
    import httpx

    from ..provider import Provider


class KernelProvider:
    """Builds the providers of one kernel's runs; `close()` ends the session's client."""

    def __init__(self, config: TinyAgent) -> None:
        self.config = config
        # One HTTP client per open session, made by its first real request: the cells
        # reuse its keep-alive connection; `close()` (new, session, unload, exit) ends it.
        self._http: httpx.Client | None = None
        # (base URL, model) -> the window its server lists; asked once per kernel (the
        # answer, or its failure, holds for every session it opens: asking again would
        # only hold another cell up).
        self._windows: dict[tuple[str, str], int | None] = {}

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def build(self, config: ProviderConfig) -> Provider:
        from ..provider import Provider, http_client  # noqa: PLC0415 (see TYPE_CHECKING)

        if self._http is None:
            self._http = http_client()
        try:
            return Provider(config, client=self._http)
        except ValueError as exc:
            # The provider names the variable and never the key (a header it refuses).
            raise NotebookError(
                f"tiny-agent-nb: {exc} Nothing was sent and nothing was recorded: fix it and "
                "restart the kernel, or `%config TinyAgent.api_key = '...'`."
            ) from None

    def context_window(
        self, model: str | None = None, *, asking: Callable[[], None] | None = None
    ) -> int | None:
        """The context window of `model` (default: the configured one) as its server's
        metadata states it; None when it states none (or could not be asked in time),
        for the offline demo model, or when no provider can be made. `asking` is called
        just before the server is asked."""
        config = self.provider_config(model)
        where = config.window_key
        if (self.config.demo_mode() and model is None) or where in self._windows:
            return self._windows.get(where)
        try:
            provider = self.build(config)
        except NotebookError:  # a key no header can carry: the run itself says so
            return None
        if asking is not None:
            asking()
        with provider:  # closes nothing shared: the session's client stays open
            self._windows[where] = provider.context_window()
        return self._windows[where]

    def provider_config(self, model: str | None = None) -> ProviderConfig:
        c = self.config
        key = c.api_key.reveal() if c.api_key is not None else None
        return ProviderConfig(
            model=model or c.model,
            base_url=c.endpoint(),
            provider=c.provider_label(),
            api_key=key,
            api_key_source=c.api_key_source(),
            stream=c.stream,
            read_timeout=float(c.request_timeout),
            attempt_timeout=c.attempt_timeout,
            max_response_bytes=c.max_response_bytes,
            temperature=c.extra.get("temperature"),
            top_p=c.extra.get("top_p"),
            max_tokens=c.extra.get("max_tokens"),
        )

    def check_ready(self, model: str | None = None) -> None:
        """Refuse early (nothing committed) when a run cannot possibly succeed. `model`
        is a cell's `--model`: it asks for a real model, so the demo does not answer it."""
        if self.config.demo_mode() and model is None:
            return
        if is_openrouter(self.config.base_url) and self.config.api_key is None:
            asked = f"--model {cell_text(model)} asks OpenRouter, but there is " if model else ""
            raise NotebookError(
                f"tiny-agent-nb: {asked}no API key for OpenRouter. Set OPENROUTER_API_KEY (or "
                "TINY_AGENT_API_KEY) and restart the kernel, or `%config TinyAgent.api_key = "
                "'...'`. For a local server: `%config TinyAgent.base_url = "
                "'http://127.0.0.1:8080/v1'` (no key needed). Nothing was sent or recorded."
            )
