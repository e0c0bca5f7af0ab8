"""Every configured MCP server of a kernel: started together, offered as tools, closed.

`McpServers` owns one loop thread (`_thread.LoopThread`) and one `ServerSession` per
configured server. Nothing here raises for a server's failure: a failure is a line for
the cell (`start`) and a state (`status`); a dead server's calls are error results.
Every wait on the kernel's thread is bounded, so no server can hang the kernel.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from dataclasses import dataclass
from typing import Literal

from ..redaction import redact
from ._config import McpConfig
from ._server import ServerRefused, ServerSession, State
from ._thread import LoopThread, wait_done, wait_event
from ._tool import McpTool

__all__ = ["McpServers", "ServerStatus"]

SDK_MISSING = (
    "MCP servers are configured but the `mcp` package is not installed: "
    "pip install 'tiny-agent-nb[mcp]'"
)
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
# Seconds a server may take to start, and one tool call (TinyAgent.mcp_*_timeout's defaults).
DEFAULT_START_TIMEOUT = 30.0
DEFAULT_CALL_TIMEOUT = 300.0
# Beyond start_timeout: a server that did not answer is shut down by the SDK's own
# bounded sequence (close stdin 2 s, SIGTERM 2 s, SIGKILL 2 s) before its line is ready.
_SHUTDOWN_BOUND = 8.0


@dataclass(frozen=True)
class ServerStatus:
    name: str
    transport: Literal["stdio", "http"]
    state: State
    version: str | None  # the server's reported version (serverInfo.version)
    tools: tuple[str, ...]  # model-visible names offered from this server
    detail: str | None  # one line: why it failed/stopped (secrets redacted), or None


class McpServers:
    """Owns one event-loop thread and every server's session (the SDK is async, the loop
    is not)."""

    def __init__(
        self,
        config: McpConfig,
        *,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        """`max_message_bytes`: what one message from a server may take, decoded (an HTTP
        answer, a stdio line); past it the message is not read."""
        self._config = config
        self._start_timeout = start_timeout
        self._call_timeout = call_timeout
        self._servers = [
            ServerSession(server, max_message_bytes=max_message_bytes) for server in config.servers
        ]
        self._thread: LoopThread | None = None
        self._tools: list[McpTool] = []
        self._log_filter = _RedactingFilter(config.secrets())
        # start() and close() one at a time: two starts at once would each spawn every
        # server, and the process one of them lost track of outlived close().
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        names = ", ".join(s.config.name for s in self._servers)
        return f"McpServers([{names}])"

    def start(self, *, retry: bool = True) -> list[str]:
        """Start every configured server that is not running, in parallel, each bounded by
        start_timeout. One readable line per problem; never raises for a server. With
        `retry=False` a server whose last start failed is not tried again (one line says
        so); a server that ran and died since is started again either way."""
        with self._lock:
            if not self._config:
                return []
            not_running = [s for s in self._servers if s.state != "running"]
            # A run does not try a server whose last start failed again: each try can cost
            # start_timeout, and a cell a minute late every time is worse than a line saying
            # so (`start(retry=True)` tries again; `failed_to_start` names them, for a
            # surface to say how its user asks for that).
            starting = [s for s in not_running if retry or s.start_failed is None]
            skipped = [
                f"MCP server {s.config.name} did not start earlier ({s.start_failed}); "
                "its tools are not offered."
                for s in not_running
                if s not in starting
            ]
            if not starting:
                return skipped
            try:
                _import_sdk()
            except ImportError:  # not installed, or installed without what it needs
                return [SDK_MISSING]
            if self._thread is None or not self._thread.alive():
                self._thread = LoopThread()
            self._log_filter.install()
            submitted: list[ServerSession] = []
            try:
                # Everything from the first submission on is one interruptible whole: a Ctrl-C
                # between two submissions (or while the tools are offered) must not leave a
                # server started behind a start that raised.
                return skipped + self._submit_and_wait(starting, submitted)
            except KeyboardInterrupt:
                # Asked to stop, not cancelled: a cancellation that lands while the SDK is
                # still spawning the process loses the process (and the guard waits for a
                # parent thread that lives on). A start stops at its next await instead.
                self._stop(submitted, cancel=False)
                for server in submitted:
                    lifetime = server.lifetime
                    if server.state == "starting" and (lifetime is None or lifetime.done()):
                        server.abandon()  # prepared, but its task never ran to say so
                raise

    def _submit_and_wait(
        self, starting: list[ServerSession], submitted: list[ServerSession]
    ) -> list[str]:
        """Start each server (appended to `submitted` as it is handed to the loop), wait
        for every start to end; one line per server that did not start, then _offer's."""
        thread = self._thread
        assert thread is not None
        for server in starting:
            # A server found dead a moment ago may still be leaving its contexts.
            wait_event(server.ended, _SHUTDOWN_BOUND)
            submitted.append(server)  # before prepare(): an interrupt after it undoes it
            server.prepare()
            server.lifetime = thread.submit(server.live(self._start_timeout))
        for server in starting:
            wait_event(server.ready, self._start_timeout + _SHUTDOWN_BOUND)
        lines = []
        for server in starting:
            if not server.ready.is_set():  # the bound above ran out: the loop is stuck
                self._stop([server], cancel=True)
            server.start_failed = None
            if server.state != "running":
                server.start_failed = server.detail or "no answer"
                lines.append(
                    f"MCP server {server.config.name} ({server.config.describe()}) did not "
                    f"start: {server.start_failed}. Its tools are not offered."
                )
        return lines + self._offer()

    def failed_to_start(self) -> list[str]:
        """The servers whose last start failed, which only `start(retry=True)` tries again."""
        with self._lock:
            return [s.config.name for s in self._servers if s.start_failed is not None]

    def tools(self) -> list[McpTool]:
        """Every tool of every running server, in configuration order."""
        running = {s.config.name for s in self._servers if s.state == "running"}
        return [t for t in self._tools if t.source.removeprefix("mcp:") in running]

    def status(self) -> list[ServerStatus]:
        offered: dict[str, list[str]] = {}
        for tool in self.tools():
            offered.setdefault(tool.source.removeprefix("mcp:"), []).append(tool.name)
        return [
            ServerStatus(
                name=s.config.name,
                transport=s.config.transport,
                state=s.state,
                version=s.version,
                tools=tuple(offered.get(s.config.name, ())),
                detail=s.detail,
            )
            for s in self._servers
        ]

    def close(self) -> None:
        """Stop every server (stdio processes gone) and end the thread; idempotent, bounded."""
        with self._lock:
            if self._thread is not None:
                self._stop(self._servers, cancel=False)
                self._thread.stop(timeout=3.0)
                self._thread = None
            self._tools = []
            for server in self._servers:
                if server.state in ("starting", "running"):
                    server.state = "stopped"
            self._log_filter.remove()

    # ------------------------------------------------------------------ internals

    def _stop(self, servers: list[ServerSession], *, cancel: bool) -> None:
        """Ask each lifetime task to exit its contexts; cancel those that do not in time
        (or at once when `cancel`: a start interrupted mid-initialize waits on no stop)."""
        thread = self._thread
        if thread is None:
            return
        for server in servers:
            thread.call_soon(server.request_stop)
        live = [s.lifetime for s in servers if s.lifetime is not None]
        if cancel or not wait_done(live, _SHUTDOWN_BOUND):
            for future in live:
                future.cancel()
            for server in servers:
                wait_event(server.ended, _SHUTDOWN_BOUND)

    def _offer(self) -> list[str]:
        """Rebuild the offered tools from every running server; lines for refused ones."""
        assert self._thread is not None
        lines: list[str] = []
        taken: dict[str, str] = {}
        tools: list[McpTool] = []
        for server in self._servers:
            if server.state != "running":
                continue
            for tool in server.tools:
                where = f"MCP tool {tool.name!r} of server {server.config.name}"
                # The model's name for it is in the file (the assistant's call): made from
                # the name as it may be kept.
                name = model_tool_name(server.config.name, server.kept(tool.name))
                if name in taken:
                    lines.append(
                        f"{where} is not offered: its name {name} is already taken by "
                        f"{taken[name]}. Rename a server in the configuration to offer both."
                    )
                    continue
                try:
                    tools.append(
                        McpTool(
                            name=name,
                            server=server,
                            tool=tool,
                            loop=self._thread,
                            call_timeout=self._call_timeout,
                        )
                    )
                except ServerRefused as exc:
                    lines.append(f"{where} is not offered: {exc}.")
                    continue
                taken[name] = f"{server.config.name}'s tool {tool.name!r}"
        self._tools = tools
        return [redact(line, self._config.secrets()) for line in lines]


def _import_sdk() -> None:
    """On the kernel's thread, before any server starts: the SDK's loggers then exist for
    the redacting filter, and an import error is not a server's failure."""
    import httpx2  # noqa: F401, PLC0415
    import mcp.client.session  # noqa: PLC0415
    import mcp.client.stdio  # noqa: PLC0415
    import mcp.client.streamable_http  # noqa: F401, PLC0415

    # The SDK logs each line a server garbles (a print() to stdout) at ERROR, with a
    # traceback; with no handler configured, logging's last resort writes that into the
    # cell. A handler of the user's own (on the root logger) still gets every record.
    for name in ("mcp", "httpx2", "httpcore2"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


class _RedactingFilter(logging.Filter):
    """On the SDK's and httpx2's loggers: a record that would show a configured secret (a
    URL's token in httpx2's request line, a server's stderr in the SDK's) is redacted."""

    _PREFIXES = ("mcp", "httpx2", "httpcore2", "httpx", "httpcore")
    # Loggers made only when their module is first imported, which httpcore2 does on the
    # first connection, after install(): named here so they exist (getLogger hands the
    # module the same logger later). httpcore2.http11 logs a refused header's value.
    _LATER = tuple(
        f"{package}.{name}"
        for package in ("httpcore2", "httpcore")
        for name in ("connection", "http11", "http2", "proxy", "socks")
    )

    def __init__(self, secrets: tuple[str, ...]) -> None:
        super().__init__()
        self._secrets = secrets
        self._loggers: list[logging.Logger] = []

    def install(self) -> None:
        # A logger's filters see only its own records, not its children's: each existing
        # logger of those packages gets the filter (they exist once the SDK is imported).
        for name in self._LATER:
            logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict):
            if name.split(".")[0] in self._PREFIXES:
                logger = logging.getLogger(name)
                if self not in logger.filters:
                    logger.addFilter(self)
                    self._loggers.append(logger)

    def remove(self) -> None:
        for logger in self._loggers:
            logger.removeFilter(self)
        self._loggers = []

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        message = record.getMessage()
        cleaned = redact(message, self._secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        if record.exc_info:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact(text, self._secrets)
        return True


MAX_NAME = 64  # OpenAI's (and most providers') limit on a function name
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASH = 8  # hex digits of the full name's digest kept when a name is shortened


def model_tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>` with every character outside `[A-Za-z0-9_-]` made `_`; a name
    over 64 characters keeps a prefix and a short hash of the full name, so two long
    names that share a prefix stay distinct."""
    full = f"{server}__{tool}"
    name = _UNSAFE.sub("_", full)
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:_HASH]
        name = f"{name[: MAX_NAME - _HASH - 1]}-{digest}"
    return name
