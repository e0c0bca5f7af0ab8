"""The model a session's runs used, so that a kernel never swaps it silently.

A notebook's `%env` / `%config` cells configure the model; a new kernel where they have
not run yet has none, and would fall back on the offline demo model. That model must not
continue a session a real model worked on (it would "complete" a real interrupted run
with a canned answer): such a run is refused, naming the model and how to configure it,
unless the user asks for the demo model (`--demo`). A real model continuing a demo
session, or another real model than the last one, is said in one line, not refused.

The model is the latest `stepAttempt`'s, followed commit by commit (no copy of the
session's state per cell).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..provider import DEMO_MODEL, DEMO_PROVIDER, ProviderConfig
from ..render import cell_text
from ..session import Fact, RecordFact, SessionState, StepAttempt
from ._config import TinyAgent
from ._opening import NotebookError
from ._provider import KernelProvider


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
