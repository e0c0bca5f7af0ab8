"""The kernel's MCP servers (docs/spec.md §5), for the configuration
`TinyAgent.mcp_servers` holds now.

Servers start when something first needs them (a run building its tools, `%agent mcp`),
never when a session is loaded (a recovery never re-runs an MCP intent). They stop with
the session and when their configuration changes. Every line returned is for a cell:
secrets redacted, control characters made visible.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ..mcp import McpConfig, McpConfigError, McpServers, ServerStatus, parse_config
from ..redaction import redact
from ..render import cell_text
from ..tools import Tool, ToolRegistry, builtin_registry
from ._config import TinyAgent
from ._opening import NotebookError

log = logging.getLogger(__name__)

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

    def tools(self) -> list[Tool]:
        """The tools of the running servers (starts nothing)."""
        if self._servers is None or self._made_from != self._key():
            return []
        return list(self._servers.tools())

    def registry(self, tools: list[str] | None, *, with_mcp: bool) -> ToolRegistry:
        """The tools a loop may call: the cell's `--tools`, else `TinyAgent.tools`; the
        default (all built-ins) also offers every tool of the running MCP servers, a list
        of one's own only the MCP tools it names (`srv__*`: all of one server's)."""
        builtins = builtin_registry()
        mcp_tools = self.tools() if with_mcp else []
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
