"""One kernel's agent: its session file, store, provider and loop.

This is the engine the magics drive; it knows nothing of IPython. Every user-facing
failure becomes a `NotebookError` with one readable message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..agent import (
    DEFAULT_SYSTEM_PROMPT,
    AgentError,
    AgentLoop,
    ChatProvider,
    ContextProjection,
    LoopConfig,
    LoopObserver,
    RecoveryReport,
    RunResult,
)
from ..provider import (
    DEMO_LABEL,
    DEMO_MODEL,
    DEMO_PROVIDER,
    DemoProvider,
    Provider,
    ProviderConfig,
)
from ..render import money
from ..session import (
    Durability,
    Fact,
    HeaderInit,
    NotASessionError,
    SessionCorruptError,
    SessionLockedError,
    SessionState,
    SessionStore,
)
from ..timeline import short_arguments
from ..tools import ToolContext, builtin_registry
from ._config import TinyAgent
from ._paths import SessionLocation, next_archive_path

AskFn = Callable[[str, object], bool]


DEMO_NOTE = (
    f"No API key and no base URL configured: using the {DEMO_LABEL.upper()}. It runs the "
    "```bash blocks of your prompt and reports; set OPENROUTER_API_KEY or "
    "TinyAgent.base_url for a real model."
)


INTERRUPTED_RECOVERY_NOTE = (
    "Loading was interrupted while it re-read what the previous kernel was reading: those "
    "reads and the run are marked interrupted (nothing was lost)."
)


class NotebookError(Exception):
    """Something the user must act on; the message says what and how."""


@dataclass
class OpenReport:
    location: SessionLocation
    created: bool
    repaired_tail_bytes: int
    state: SessionState
    recovery: RecoveryReport | None
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        s = self.state
        where = self.location.path.name
        if self.created:
            head = f"tiny-agent-nb: new session {where} ({_source(self.location)})."
            return "\n".join([head, *(f"  {note}" for note in self.notes)])
        cost = money(s.totals.known_cost, s.totals.unpriced)
        lines = [
            f"tiny-agent-nb: session {where} ({_source(self.location)}) — "
            f"{len(s.operations)} run(s), {cost}."
        ]
        if self.repaired_tail_bytes:
            lines.append(
                f"  Dropped {self.repaired_tail_bytes} torn bytes: an append cut short when the "
                "kernel died (never committed)."
            )
        r = self.recovery
        if r is not None:
            lines.append(
                "  The previous kernel stopped during a run; it is now marked interrupted."
            )
            for intent in r.interrupted:
                lines.append(
                    f"  ⚠ {intent.tool.name} {short_arguments(intent.arguments)} — interrupted: "
                    "it may have run; it was not run again."
                )
            for intent in r.replayed:
                summary = short_arguments(intent.arguments)
                lines.append(f"  ↻ {intent.tool.name} {summary} — replayed (read-only)")
            if r.failed_attempts:
                lines.append(
                    f"  {r.failed_attempts} model request(s) in flight were marked interrupted."
                )
        latest = list(s.operations.values())[-1] if s.operations else None
        if latest is not None and latest.status in ("interrupted", "aborted"):
            lines.append("  `%agent resume` continues the interrupted run.")
        lines.extend(f"  {note}" for note in self.notes)
        return "\n".join(lines)


def _source(location: SessionLocation) -> str:
    return {
        "explicit": "set explicitly",
        "JPY_SESSION_NAME": "beside this notebook",
        "__vsc_ipynb_file__": "beside this notebook (VS Code)",
        "default": "no notebook name known; in the current directory",
    }[location.source]


class NotebookAgent:
    def __init__(self, config: TinyAgent, namespace: dict[str, object]) -> None:
        self.config = config
        self.namespace = namespace
        self.store: SessionStore | None = None
        self.location: SessionLocation | None = None
        self.open_error: str | None = None
        # Built once per open session and kept current by its subscription, so a cell
        # does not decode and re-encode the whole history before its first request.
        self._context: ContextProjection | None = None
        self._unfollow_context: Callable[[], None] | None = None

    # ------------------------------------------------------------------ session file
    def open(self, location: SessionLocation) -> OpenReport:
        try:
            report = self._open(location)
        except NotebookError as exc:
            self.open_error = str(exc)
            raise
        self.open_error = None
        return report

    def _open(self, location: SessionLocation) -> OpenReport:
        self.close()
        self.location = location
        demo = self.config.demo_mode()
        init = HeaderInit(
            cwd=str(Path.cwd()),
            provider=self.config.provider_label(),
            model=DEMO_MODEL if demo else self.config.model,
            environment_identity=str(self.workspace()),
        )
        location.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            durability: Durability = "power" if self.config.durability == "power" else "process"
            store = SessionStore.open(location.path, create=init, durability=durability)
        except SessionLockedError as exc:
            who = f"process {exc.holder_pid}" if exc.holder_pid else "another kernel"
            if exc.in_process:
                who = "this kernel already (another open session object)"
            raise NotebookError(
                f"tiny-agent-nb: {location.path.name} is in use by {who}; this kernel will not "
                "write to it. Stop that kernel, or use `%agent session OTHER.jsonl`."
            ) from None
        except SessionCorruptError as exc:
            raise NotebookError(
                f"tiny-agent-nb: {exc.path} line {exc.line} is damaged ({exc.reason}). Nothing was "
                f"changed. Inspect it with `tiny-agent-nb inspect {exc.path}`, or start a fresh "
                "session with `%agent new`."
            ) from None
        except NotASessionError as exc:
            raise NotebookError(
                f"tiny-agent-nb: {exc.path} is not a session file ({exc.reason}); it was left "
                "untouched. Choose another file with `%agent session PATH`."
            ) from None
        self.store = store
        notes = [DEMO_NOTE] if demo else []
        try:
            recovery = self._loop().recover()
        except AgentError as exc:  # the file refused the write (disk full): nothing changed
            self.close()
            raise NotebookError(f"tiny-agent-nb: {exc}") from None
        except KeyboardInterrupt:
            if store.open_operation() is not None:
                raise  # before recovery settled anything: the next load does it all
            recovery = None  # recover() settled the run before letting it through
            notes.append(INTERRUPTED_RECOVERY_NOTE)
        return OpenReport(
            location=location,
            created=store.created,
            repaired_tail_bytes=store.repaired_tail_bytes,
            state=store.load(),
            recovery=recovery,
            notes=notes,
        )

    def close(self) -> None:
        self._forget_context()
        if self.store is not None:
            self.store.close()
            self.store = None

    def context(self) -> ContextProjection:
        """What the model is sent, followed for the open session across cells."""
        store = self.require_store()
        if self._context is None:
            context = ContextProjection.from_state(store.load(), None)

            def follow(facts: Sequence[Fact]) -> None:
                try:
                    context.apply(facts)
                except Exception:
                    # Out of step with the file from here on: the next cell rebuilds it
                    # from the file instead of sending a conversation with a hole in it.
                    self._forget_context()
                    raise

            self._context = context
            self._unfollow_context = store.subscribe(follow)
        return self._context

    def _forget_context(self) -> None:
        if self._unfollow_context is not None:
            self._unfollow_context()
        self._context = self._unfollow_context = None

    def new(self) -> tuple[Path, OpenReport]:
        """Keep the current file under the next free `<stem>.agent.<n>.jsonl`; start fresh."""
        location = self._require_location()
        self.close()
        archived = next_archive_path(location.path)
        if location.path.exists():
            location.path.rename(archived)
        return archived, self.open(location)

    def require_store(self) -> SessionStore:
        if self.store is None:
            # Repeat why the last open failed (e.g. the file is in use by another kernel).
            raise NotebookError(
                self.open_error or "tiny-agent-nb: no session is open. Use `%agent session PATH`."
            )
        return self.store

    def _require_location(self) -> SessionLocation:
        if self.location is None:
            raise NotebookError("tiny-agent-nb: no session file chosen. Use `%agent session PATH`.")
        return self.location

    # ------------------------------------------------------------------ runs
    def run(
        self,
        prompt: str,
        *,
        observer: LoopObserver,
        ask: AskFn | None,
        model: str | None = None,
        max_steps: int | None = None,
        tools: list[str] | None = None,
        approve: str | None = None,
    ) -> RunResult:
        loop = self._loop(
            observer=observer,
            ask=ask,
            model=model,
            max_steps=max_steps,
            tools=tools,
            approve=approve,
        )
        try:
            return loop.run(prompt)
        except AgentError as exc:
            raise NotebookError(f"tiny-agent-nb: {exc}") from None
        finally:
            loop.close()

    def resume(self, *, observer: LoopObserver, ask: AskFn | None) -> RunResult:
        loop = self._loop(observer=observer, ask=ask)
        try:
            return loop.resume()
        except AgentError as exc:
            raise NotebookError(f"tiny-agent-nb: {exc}.") from None
        finally:
            loop.close()

    def workspace(self) -> Path:
        return Path(self.config.workspace or Path.cwd()).resolve()

    def _loop(
        self,
        *,
        observer: LoopObserver | None = None,
        ask: AskFn | None = None,
        model: str | None = None,
        max_steps: int | None = None,
        tools: list[str] | None = None,
        approve: str | None = None,
    ) -> AgentLoop:
        store = self.require_store()
        provider_config = self.provider_config(model)
        provider: ChatProvider = Provider(provider_config)
        if self.config.demo_mode() and model is None:
            provider = DemoProvider()
            provider_config = replace(provider_config, provider=DEMO_PROVIDER, model=DEMO_MODEL)
        registry = builtin_registry()
        try:
            registry = registry.subset(tools or self.config.tools)
        except ValueError as exc:
            raise NotebookError(f"tiny-agent-nb: {exc}") from None
        config = LoopConfig(
            provider=provider_config.provider,
            model=provider_config.model,
            provider_digest=provider_config.digest_material(),
            system_prompt=self.config.system_prompt or DEFAULT_SYSTEM_PROMPT,
            max_steps=max_steps or self.config.max_steps,
            approval=(approve or self.config.approve),  # type: ignore[arg-type]
        )
        return AgentLoop(
            store,
            provider,
            registry,
            ToolContext(
                workspace=self.workspace(), namespace=self.namespace, secrets=self.config.secrets()
            ),
            config,
            ask=ask,
            observer=observer,
            projection=self.context(),
        )

    def provider_config(self, model: str | None = None) -> ProviderConfig:
        c = self.config
        key = c.api_key.reveal() if c.api_key is not None else None
        return ProviderConfig(
            model=model or c.model,
            base_url=c.base_url,
            provider=c.provider_label(),
            api_key=key,
            api_key_source=c.api_key_source(),
            stream=c.stream,
            read_timeout=float(c.request_timeout),
            temperature=c.extra.get("temperature"),
            top_p=c.extra.get("top_p"),
            max_tokens=c.extra.get("max_tokens"),
        )

    def check_ready(self) -> None:
        """Refuse early (nothing committed) when a run cannot possibly succeed."""
        if self.config.demo_mode():
            return
        if "openrouter.ai" in self.config.base_url and self.config.api_key is None:
            raise NotebookError(
                "tiny-agent-nb: no API key for OpenRouter. Set OPENROUTER_API_KEY (or "
                "TINY_AGENT_API_KEY) and restart the kernel, or `%config TinyAgent.api_key = "
                "'...'`. For a local server: `%config TinyAgent.base_url = "
                "'http://127.0.0.1:8080/v1'` (no key needed)."
            )
