"""How one kernel makes the loop of a run: the provider (or the offline demo model), the
window the server lists for the model, the tools, the configuration digest, and the
`LoopConfig` from `TinyAgent` and a cell's options.

The kernel's MCP servers (`KernelServers`, docs/spec.md §5) start when something first
needs them (a run building its tools, `%agent mcp`), never when a session is loaded (a
recovery never re-runs an MCP intent); they stop with the session and when their
configuration changes. Every line they say is for a cell: secrets redacted, control
characters made visible.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent import (
    AgentLoop,
    ChatProvider,
    LoopConfig,
    LoopObserver,
    notebook_system_prompt,
)
from ..mcp import McpConfig, McpConfigError, McpServers, ServerStatus, parse_config
from ..provider import DEMO_MODEL, METADATA_SECONDS, DemoProvider
from ..redaction import redact
from ..render import cell_text
from ..session import Approval, Operation, RunOptions, SessionStore
from ..tools import NOTEBOOK_TOOLS, Notebook, Tool, ToolContext, ToolRegistry, builtin_registry
from ._config import TinyAgent
from ._opening import NotebookError
from ._provider import DEMO_ADVICE, KernelProvider, SessionModel

AskFn = Callable[[str, object], bool]
# The cell's note before the kernel asks the server's metadata for the window.
ASKING = (
    "asking the server for the model's context window (once per kernel, at most "
    f"{METADATA_SECONDS:g} seconds; setting TinyAgent.context_window skips it)"
)
# Ctrl-C while the server's metadata was asked for the window (a server may hold that
# answer up to METADATA_SECONDS, and it is asked again by the next cell).
WINDOW_ASK_INTERRUPTED = (
    "■ Interrupted while asking the server for the model's context window, before the "
    "run started: nothing was sent or recorded. Setting TinyAgent.context_window (tokens) "
    "skips asking."
)


def continuing(
    options: dict[str, Any], demo: bool, stopped: Operation | None
) -> tuple[dict[str, Any], bool]:
    """The options of what continues the `stopped` run (`%agent resume`, the Resume
    button, `%agent compact` after a stop), and whether the demo model answers: those
    given, the rest as the run recorded them (`LoopBuilder.build` reads `recorded`), never
    the configuration's over the run's; the run's model, or the demo when it answered."""
    recorded = stopped.options if stopped is not None else None
    model = options.get("model")
    if recorded is not None and model is None and not demo:
        demo = recorded.model == DEMO_MODEL
        model = None if demo else recorded.model
    return {**options, "model": model, "recorded": recorded}, demo


@dataclass(frozen=True)
class Chosen:
    """The options a run uses: `tools` are names or a server's patterns for the registry
    (None: the configuration's); `inherited`: they are those of the run it continues."""

    approve: Approval
    budget: float | None
    max_steps: int
    tools: list[str] | None
    inherited: bool


def chosen_options(
    config: TinyAgent,
    recorded: RunOptions | None,
    *,
    approve: Approval | None = None,
    budget: float | None = None,
    max_steps: int | None = None,
    tools: list[str] | None = None,
) -> Chosen:
    """Each option as given (the cell's, `%agent resume`'s); else as the run it continues
    recorded it (`recorded`, docs/spec.md §2.3); else as the configuration says. What a run
    builds its loop with and what a cell run again is matched by (`_rerun`)."""
    if budget is None:  # a run's budget recorded as None is no limit, not "unset"
        budget = config.budget if recorded is None else recorded.budget
    return Chosen(
        approve=approve or (config.approve if recorded is None else recorded.approve),
        budget=budget,
        max_steps=max_steps or (config.max_steps if recorded is None else recorded.maxSteps),
        tools=recorded.tools if tools is None and recorded is not None else tools,
        inherited=tools is None and recorded is not None,
    )


class LoopBuilder:
    """Makes a run's `AgentLoop` over a store, as `TinyAgent` and the cell configure it."""

    def __init__(
        self,
        config: TinyAgent,
        namespace: dict[str, object],
        hidden_variables: Mapping[str, object],
        propose_cell: Callable[[str], str] | None,
        *,
        notebook: Notebook | None = None,
        provider: KernelProvider,
        mcp: KernelServers,
        session_model: SessionModel,
    ) -> None:
        self.config = config
        self.namespace = namespace
        self.hidden_variables = hidden_variables
        self.propose_cell = propose_cell
        self.notebook = notebook
        self.provider = provider
        self.mcp = mcp
        self.session_model = session_model

    def workspace(self) -> Path:
        return Path(self.config.workspace or Path.cwd()).resolve()

    def build(
        self,
        store: SessionStore,
        *,
        stopped_by: Callable[[], str | None] | None,
        observer: LoopObserver | None = None,
        ask: AskFn | None = None,
        model: str | None = None,
        max_steps: int | None = None,
        budget: float | None = None,
        tools: list[str] | None = None,
        approve: Approval | None = None,
        provider: ChatProvider | None = None,
        with_mcp: bool = True,
        demo: bool = False,
        recorded: RunOptions | None = None,
    ) -> AgentLoop:
        """`run`'s options (None: the run's as `recorded`, else the configured value, see
        `continuing`); `provider`: a recovery's, which asks no server."""
        chosen = chosen_options(
            self.config,
            recorded,
            approve=approve,
            budget=budget,
            max_steps=max_steps,
            tools=tools,
        )
        tools = chosen.tools
        provider_config = self.session_model.asked(model, demo)
        window = self.config.context_window
        listed: int | None = None
        if self.session_model.uses_demo(model, demo):
            provider = DemoProvider(advice=DEMO_ADVICE)
        elif provider is None:
            provider = self.provider.build(provider_config)
            # Unset, and not learned by this session yet, the window is the one the
            # server's metadata states for this model (asked once per kernel, said in the
            # cell; the loop records it). A recovery's loop (a provider given) asks none.
            if not window and store.learned_window(*provider_config.window_key) is None:
                say = observer.on_notice if observer is not None else None
                try:
                    listed = self.provider.context_window(
                        model, asking=None if say is None else lambda: say(ASKING)
                    )
                except KeyboardInterrupt:  # nothing of the run exists yet: say so
                    raise NotebookError(WINDOW_ASK_INTERRUPTED) from None
        try:
            registry = self.mcp.registry(tools, with_mcp=with_mcp)
            if self.notebook is None:
                registry = registry.subset(n for n in registry.names if n not in NOTEBOOK_TOOLS)
        except NotebookError as exc:
            if not chosen.inherited:
                raise
            raise NotebookError(
                f"{exc}. The run this continues was offered {cell_text(', '.join(tools or []))}; "
                "nothing was sent or recorded. `--tools a,b` chooses the tools it is offered."
            ) from None
        system_prompt = self.config.system_prompt or notebook_system_prompt(
            workspace=str(self.workspace()),
            tools=registry.names,
            today=datetime.date.today(),
            user_cells=self.config.user_cells_chars > 0,
        )
        config = LoopConfig(
            provider_config,
            mcp_servers=self.mcp.digest_material(registry),
            system_prompt=system_prompt,
            max_steps=chosen.max_steps,
            budget=chosen.budget,
            approval=chosen.approve,
            context_window=window,
            listed_window=listed,
            compact_threshold=self.config.compact_threshold,
            keep_tail_tokens=self.config.keep_tail_tokens,
        )
        return AgentLoop(
            store,
            provider,
            registry,
            ToolContext(
                workspace=self.workspace(),
                namespace=self.namespace,
                hidden_variables=self.hidden_variables,
                propose_cell=self.propose_cell,
                notebook=self.notebook,
                secrets=self.config.secrets(),
                file_store=self.config.file_store(store.header.id),
            ),
            config,
            ask=ask,
            observer=observer,
            stopped_by=stopped_by,
        )


log = logging.getLogger(__name__)

# ---------------------------------------------------------------- the MCP servers
# The traits a running set of servers was started with: a change of any of them stops
# the servers, and the next run starts them from the new configuration.
TRAITS = ("mcp_servers", "mcp_start_timeout", "mcp_call_timeout")
# The engine says a server did not start; the notebook says how to try it again (a run
# does not: each try may cost the start timeout).
RETRY_ADVICE = "`%agent mcp` tries the servers that did not start again."
NONE_CONFIGURED = (
    "No MCP servers are configured. Set TinyAgent.mcp_servers (env TINY_AGENT_MCP_SERVERS) "
    'to the JSON {"mcpServers": {NAME: {"command": ..., "args": [...]} | {"url": ...}}} '
    "other MCP clients use, or to the path of a file holding it."
)


class KernelServers:
    def __init__(self, config: TinyAgent) -> None:
        self._config = config
        self._servers: McpServers | None = None
        self._parsed: McpConfig = McpConfig()
        # What `_servers` was made from, secrets included: `mcp_servers` itself shows
        # them as ****, so a new env value alone would leave the trait unchanged.
        self._made_from: tuple[str, float, float] | None = None
        config.observe(self._changed, names=list(TRAITS))

    def start(self, *, retry: bool = False) -> list[str]:
        """Start the configured servers that are not running: one that died since it ran
        is started again; one whose start failed only with `retry` (`%agent mcp`), since a
        run would wait up to its start timeout every time. Returns the lines for the cell:
        one per server that failed and per tool refused, or the one line saying what is
        wrong with the configuration.
        KeyboardInterrupt passes (what was starting is stopped)."""
        try:
            servers = self._current()
        except McpConfigError as exc:
            return [
                self._line(
                    f"tiny-agent-nb: TinyAgent.mcp_servers: {exc}. No MCP server was started; "
                    "the built-in tools work as before. Fix it with `%config "
                    "TinyAgent.mcp_servers = ...` (or TINY_AGENT_MCP_SERVERS)."
                )
            ]
        if servers is None:
            return []
        try:
            problems = servers.start(retry=retry)
        except Exception as exc:  # a bug: never raised for a server's own failure
            log.exception("starting the MCP servers failed")
            self.close()
            return [
                self._line(
                    f"tiny-agent-nb: the MCP servers could not be started ({type(exc).__name__}: "
                    f"{exc}); this run goes on without their tools, and the next one tries again."
                )
            ]
        lines = [self._line(problem) for problem in problems]
        if servers.failed_to_start():
            lines.append(RETRY_ADVICE)
        return lines

    def registry(self, tools: list[str] | None, *, with_mcp: bool) -> ToolRegistry:
        """The tools a loop may call: the cell's `--tools`, else `TinyAgent.tools`; the
        default (all built-ins) also offers every tool of the running MCP servers, a list
        of one's own only the MCP tools it names (`srv__*`: all of one server's)."""
        builtins = builtin_registry()
        # The running servers' (starts none), if started from the current configuration.
        running = self._servers if self._made_from == self._key() else None
        mcp_tools = list(running.tools()) if with_mcp and running is not None else []
        wanted = list(self._config.tools if tools is None else tools)  # [] offers none
        if tools is None and set(wanted) == set(builtins.names):
            wanted += [tool.name for tool in mcp_tools]
        try:
            return ToolRegistry([*builtins, *mcp_tools]).subset(wanted)
        except ValueError as exc:
            raise NotebookError(f"tiny-agent-nb: {cell_text(str(exc))}") from None

    def digest_material(self, tools: Iterable[Tool]) -> list[dict[str, Any]]:
        """What a configurationDigest covers of the servers `tools` come from: where each
        is and its env and header names, never a value (`ServerConfig.digest_material`)."""
        sources = {tool.identity.source for tool in tools}
        return [s.digest_material() for s in self._parsed.servers if f"mcp:{s.name}" in sources]

    def report(self) -> list[str]:
        """`%agent mcp`: starts the servers, then one block per server: name, transport,
        state, version, the tools the model sees, why it failed."""
        problems = self.start(retry=True)
        if self._servers is None:
            return problems or [NONE_CONFIGURED]
        out = []
        described = {server.name: server.describe() for server in self._parsed.servers}
        for status in self._servers.status():
            # A failed server was just tried again: its line among `problems` says why.
            said = status.state == "failed" and bool(problems)
            out.extend(self._status_lines(status, described.get(status.name), said=said))
        if problems:
            out += ["", *problems]
        return out

    def close(self) -> None:
        """Stop every server (their processes gone); the next `start` starts them again."""
        servers, self._servers, self._made_from = self._servers, None, None
        self._parsed = McpConfig()
        if servers is not None:
            servers.close()

    # ------------------------------------------------------------------ helpers
    def _key(self) -> tuple[str, float, float]:
        c = self._config
        return c.mcp_source(), float(c.mcp_start_timeout), float(c.mcp_call_timeout)

    def _current(self) -> McpServers | None:
        key = self._key()
        if self._made_from != key:
            self.close()
            parsed = parse_config(key[0])  # raises McpConfigError: nothing started
            if parsed:
                self._servers = McpServers(parsed, start_timeout=key[1], call_timeout=key[2])
            self._parsed, self._made_from = parsed, key
        return self._servers

    def _changed(self, change: Any) -> None:
        if change["old"] != change["new"]:
            self.close()

    def _line(self, text: str) -> str:
        return cell_text(redact(text, self._config.secrets()))

    def _status_lines(
        self, status: ServerStatus, described: str | None, *, said: bool
    ) -> list[str]:
        head = f"{status.name} — {status.state} ({described or status.transport})"
        if status.version:
            head += f", version {status.version}"
        lines = [self._line(head)]
        if status.tools:
            lines.append("  tools: " + self._line(", ".join(status.tools)))
        elif status.state == "running":
            lines.append("  tools: none")
        if status.detail and not said:
            lines.append("  " + self._line(status.detail))
        return lines
