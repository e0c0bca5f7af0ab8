"""The kernel's way to the model: the provider configuration read from `TinyAgent`, one
HTTP client per open session (every cell reuses its keep-alive connection), the context
window each server lists for a model (asked once per kernel), and the early refusal of
a run that cannot succeed (nothing committed, nothing sent).

`SessionModel`: the model a session's runs used, so that a kernel never swaps it
silently. A new kernel where the notebook's `%env` / `%config` cells have not run yet has
no model and would fall back on the offline demo model, which must not continue a session
a real model worked on (it would "complete" a real interrupted run with a canned answer):
such a run is refused, naming the model and how to configure it, unless `--demo` asks for
it. Another real model, or a real model after the demo, is said in one line.

What the notebook says when the offline demo model answers: a banner once per kernel
(`demo_note_after`) and a label line in each cell it answers (its answer does not repeat it).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..provider import DEMO_LABEL, DEMO_MODEL, DEMO_PROVIDER, ProviderConfig
from ..render import cell_text
from ..session import Fact, RecordFact, SessionState, StepAttempt
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


class SessionModel:
    """The provider and model of the followed session's latest model attempt, and what a
    run with the kernel's configuration and a cell's options does about it."""

    def __init__(self, config: TinyAgent, kernel: KernelProvider) -> None:
        self.config = config
        self.kernel = kernel
        self.provider: str | None = None
        self.model: str | None = None

    def reset(self, state: SessionState) -> None:
        latest = next(state.attempts_newest_first(), None)
        self.provider = latest.provider if latest is not None else None
        self.model = latest.model if latest is not None else None

    def observe(self, facts: Sequence[Fact]) -> None:
        """A watcher of the current session's commits (its `()` on a switch is ignored:
        the new session's `reset` follows)."""
        for fact in facts:
            if isinstance(fact, RecordFact) and isinstance(fact.record, StepAttempt):
                self.provider, self.model = fact.record.provider, fact.record.model

    @property
    def real(self) -> bool:
        """A model other than the offline demo answered this session last."""
        return self.provider is not None and self.provider != DEMO_PROVIDER

    def uses_demo(self, model: str | None, demo: bool) -> bool:
        """Whether a run with a cell's `--model` / `--demo` is answered by the demo model."""
        return demo or (self.config.demo_mode() and model is None)

    # ------------------------------------------------------------------ what is said
    def waiting_note(self) -> str | None:
        """For the report of `%load_ext`: which model the session used, and how to
        configure it, when this kernel has none yet."""
        if not (self.config.demo_mode() and self.real):
            return None
        return (
            f"This session's runs used {self._named()}; no model is configured in this kernel "
            f"yet, so runs wait for one: {self._how()}, or `%%agent --demo` to let the "
            "offline demo model answer instead."
        )

    def refuse_demo(self, model: str | None, *, demo: bool, command: str) -> None:
        """Refuse a run the offline demo model would answer, unless `--demo` asks for it,
        in a session a real model worked on (nothing is sent or recorded)."""
        if demo or not (self.uses_demo(model, demo) and self.real):
            return
        how = self._how()
        raise NotebookError(
            f"tiny-agent-nb: this session's runs used {self._named()}, and no model is "
            "configured in this kernel (no API key, no base URL), so only the offline demo "
            f"model could answer; nothing was sent or recorded. {how[0].upper()}{how[1:]}, "
            f"or `{command} --demo` to let the offline demo model answer anyway."
        )

    def asked(self, model: str | None = None, demo: bool = False) -> ProviderConfig:
        """What a run with a cell's `--model` / `--demo` asks in this kernel: the one
        translation of `TinyAgent` a run's loop, its label and its digest read."""
        config = self.kernel.provider_config(model)
        if self.uses_demo(model, demo):
            return replace(config, provider=DEMO_PROVIDER, model=DEMO_MODEL)
        return config

    def change_note(self, model: str | None, demo: bool) -> str | None:
        """One line when a run uses another model than the session's runs used last."""
        asked = self.asked(model, demo)
        if self.provider is None or (self.provider, self.model) == (asked.provider, asked.model):
            return None
        return (
            f"↔ This session's runs used {self._named()}; this one uses "
            f"{cell_text(asked.model)} ({cell_text(asked.provider)})."
        )

    def _named(self) -> str:
        return f"{cell_text(self.model or '')} ({cell_text(self.provider or '')})"

    def _how(self) -> str:
        """How to configure, in this kernel, the model the session used."""
        where = (
            "set OPENROUTER_API_KEY (or `%config TinyAgent.api_key = '...'`)"
            if self.provider == "openrouter"
            else "point `%config TinyAgent.base_url = '...'` (env TINY_AGENT_BASE_URL) at "
            "its server"
        )
        model = (
            f" and `%config TinyAgent.model = {cell_text(repr(self.model))}`"
            if self.model and self.model != self.config.model
            else ""
        )
        return f"run the notebook's cell that configures it, or {where}{model}"


DEMO_CELL_LABEL = f"[{DEMO_LABEL}]"

# Said once per kernel (a shell), after the cell that first loads the extension in demo
# mode: not again on a reload, `%agent new` or `%agent session`. Short lines: a terminal
# or a cell output wraps long ones mid-word.
DEMO_NOTE = f"""\
tiny-agent-nb: no API key and no base URL configured, so %%agent cells use the
  {DEMO_LABEL.upper()}. It runs the ```bash
  blocks of a prompt and reports what happened to each command.
  For a real model set OPENROUTER_API_KEY, or TinyAgent.base_url
  (env TINY_AGENT_BASE_URL) for a local OpenAI-compatible server."""
# What the banner says of a command's approval (TinyAgent.approve), by its value.
DEMO_APPROVAL = {
    "ask": '  It asks you before each command (TinyAgent.approve = "ask";\n'
    "  %%agent --approve auto runs them without asking).",
    "auto": '  It runs each command without asking (TinyAgent.approve = "auto").',
    "deny": '  It runs no command (TinyAgent.approve = "deny").',
}
# How each of the demo model's answers ends: the notebook's settings for a real model.
DEMO_ADVICE = (
    "For a real model set OPENROUTER_API_KEY, or point TinyAgent.base_url (env "
    "TINY_AGENT_BASE_URL) at a local OpenAI-compatible server."
)
_told_demo: weakref.WeakSet[Any] = weakref.WeakSet()


def demo_note_after(shell: Any, config: TinyAgent) -> Callable[..., None]:
    """A post_run_cell callback for the cell that loads the extension: the banner, said
    at the end of that cell and only if the demo model still answers then (a `%config
    TinyAgent.base_url = ...` or `api_key` after `%load_ext` in the same cell means no
    demo, and no banner). It unregisters itself."""

    def after_cell(*_: object) -> None:
        shell.events.unregister("post_run_cell", after_cell)
        if config.demo_mode() and shell not in _told_demo:
            print(f"{DEMO_NOTE}\n{DEMO_APPROVAL[config.approve]}")
            _told_demo.add(shell)

    return after_cell
