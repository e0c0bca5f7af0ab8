"""One MCP server's lifetime on the loop thread.

ONE task (`_live`) enters the transport and the `ClientSession`, initializes, lists the
tools (every page), then waits until it is told to stop or the connection ends, and
exits the contexts: anyio's cancel scopes must be entered and left by the same task.
Calls run as other tasks on the same loop, through the session this task holds.

Everything the SDK imports is imported here, when a server starts: `import
tiny_agent_nb.mcp` stays cheap and works without the SDK.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Literal

from .._exceptions import TinyAgentError
from ..redaction import redact, redact_url
from ..tools import clean_text
from ._config import ServerConfig

if TYPE_CHECKING:
    import mcp_types
    from mcp.client.session import ClientSession

    from ._stdio import StderrTail

State = Literal["not started", "starting", "running", "failed", "stopped"]


class NotRunningError(TinyAgentError):
    """The server is not running; the message says why."""


class ServerRefused(TinyAgentError):
    """What the server did cannot be used; the message says what, for the failed line."""


MAX_PAGES = 1000  # of tools/list: ten thousand tools and more, at the usual page sizes


class ServerSession:
    """One configured server: its state, tools and session. Mutated only on the loop
    thread; read (state, version, tools, detail) from the kernel's."""

    def __init__(self, config: ServerConfig, *, max_message_bytes: int) -> None:
        self.config = config
        self.max_message_bytes = max_message_bytes
        self.state: State = "not started"
        self.version: str | None = None
        self.tools: list[mcp_types.Tool] = []
        self.detail: str | None = None
        self.ready = threading.Event()  # set when a start ended: running or failed
        self.ended = threading.Event()  # set when the lifetime task is over
        self.ended.set()
        # Kept by McpServers on the kernel's thread: the lifetime task, and why the last
        # start failed (None when it did not).
        self.lifetime: concurrent.futures.Future[None] | None = None
        self.start_failed: str | None = None
        self._session: ClientSession | None = None
        # (Re)made by prepare(): a stop asked before the task first runs must count.
        self._stop, self._closed = asyncio.Event(), asyncio.Event()
        self._stderr: StderrTail | None = None
        self._http_status: int | None = None  # the last HTTP error status seen
        self._lost: str | None = None  # why a call found the connection gone
        # Why the transport refused what the server sent last (too large, undecodable).
        self._refused: str | None = None

    # ------------------------------------------------------------ on the kernel's thread

    def prepare(self) -> None:
        self.state, self.detail, self.tools, self.version = "starting", None, [], None
        self.ready.clear()
        self.ended.clear()
        self._lost, self._http_status, self._refused = None, None, None
        # Made here, not in the task (asyncio events bind to a loop when first waited on).
        self._stop, self._closed = asyncio.Event(), asyncio.Event()

    def abandon(self) -> None:
        """A start given up (Ctrl-C) after prepare() and before its task ran: nothing
        started, so nothing is left to wait for."""
        self.state = "stopped"
        self.ready.set()
        self.ended.set()

    def request_stop(self) -> None:
        """Called on the loop thread (call_soon): the lifetime task exits its contexts."""
        self._stop.set()

    # ------------------------------------------------------------ on the loop thread

    async def live(self, start_timeout: float) -> None:
        """The lifetime task: start, serve until told to stop or the connection ends."""
        import anyio  # noqa: PLC0415

        failure: str | None = None
        try:
            async with self._connected() as session:
                try:
                    with anyio.fail_after(start_timeout):
                        started = await self._initialize_unless_closed(session)
                except TimeoutError:
                    failure = f"did not answer initialize and tools/list within {start_timeout:g} s"
                    return
                if not started:
                    if not self._stop.is_set():
                        failure = "the server exited before it answered"
                    return
                self._session, self.state = session, "running"
                self.ready.set()
                await _first(self._stop.wait(), self._closed.wait())
                self._session = None
                if not self._stop.is_set():
                    failure = (
                        self._lost
                        or self._refused
                        or ("the server exited" if self._stderr else "the connection closed")
                    )
                    # At once, not after the contexts below are left (the SDK's shutdown of
                    # a process takes a while): the next start() must restart this server.
                    self.state, self.detail = "failed", self._redacted(failure)
        except Exception as exc:
            # Once a call found the connection gone, ending the session fails the same way.
            # A stop asked for (Ctrl-C in a start, a close) may break the SDK's streams
            # under a request in flight (BrokenResourceError): that is the stop itself.
            if not self._stop.is_set():
                failure = self._lost or self._refused or self._describe(exc)
        finally:
            self._session = None
            if failure is None and self._stop.is_set():
                self.state, self.detail = "stopped", None
            else:
                self.state = "failed"
                self.detail = self._redacted(self._with_stderr(failure or "stopped"))
            self.ready.set()
            self.ended.set()

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[ClientSession]:
        import anyio  # noqa: PLC0415
        from mcp.client.session import ClientSession  # noqa: PLC0415

        async with contextlib.AsyncExitStack() as stack:
            read, write = await self._enter_transport(stack)
            # A relay between the transport and the session: the transport's stream
            # ending is how a stdio server's death is seen while no call is running.
            relay_send, relay_receive = anyio.create_memory_object_stream[Any](0)
            closed = self._closed

            async def relay() -> None:
                async with relay_send:
                    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
                        async for message in read:
                            await relay_send.send(message)
                    closed.set()

            group = await stack.enter_async_context(anyio.create_task_group())
            group.start_soon(relay)
            stack.callback(group.cancel_scope.cancel)
            session = ClientSession(relay_receive, write)
            yield await stack.enter_async_context(session)

    async def _enter_transport(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        if self.config.transport == "stdio":
            from ._stdio import StderrTail, bounded_stdio_client  # noqa: PLC0415

            self._stderr = StderrTail()
            return await stack.enter_async_context(
                bounded_stdio_client(
                    self.config,
                    self._stderr,
                    limit=self.max_message_bytes,
                    on_refused=self._note_refused,
                )
            )
        import httpx2  # noqa: PLC0415
        from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

        from ._http import bounded_client  # noqa: PLC0415

        assert self.config.url is not None
        self._http_status = None

        async def note_status(response: httpx2.Response) -> None:
            # The transport turns a 401 into "Server returned an error response"; the
            # status is what tells the user to look at the configured headers.
            if response.status_code >= 400:
                self._http_status = response.status_code

        client = bounded_client(
            dict(self.config.headers),
            limit=self.max_message_bytes,
            on_status=note_status,
            on_refused=self._note_refused,
        )
        await stack.enter_async_context(client)
        return await stack.enter_async_context(
            streamable_http_client(self.config.url, http_client=client)
        )

    async def _initialize_unless_closed(self, session: ClientSession) -> bool:
        """Initialize and list the tools; False when the connection ended first (a server
        that exits at once may do so before the request is written, and then nothing
        would ever answer it) or a stop was asked for (Ctrl-C during the start)."""
        import anyio  # noqa: PLC0415

        async with anyio.create_task_group() as group:

            async def watch() -> None:
                await _first(self._closed.wait(), self._stop.wait())
                group.cancel_scope.cancel()

            group.start_soon(watch)
            await self._initialize(session)
            group.cancel_scope.cancel()
            return True
        return False  # cancelled by watch()

    async def _initialize(self, session: ClientSession) -> None:
        import mcp_types  # noqa: PLC0415

        result = await session.initialize()
        version = result.server_info.version if result.server_info else None
        # It enters every toolStarted of this server's tools: a server may report its own
        # env (a token) as its version, or a lone surrogate no commit can take.
        self.version = None if version is None else self.kept(version)
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
            if cursor in seen or len(seen) >= MAX_PAGES:
                # A server that always says "there is more" would otherwise be listed
                # until start_timeout, its tools piling up, and blamed for not answering.
                raise ServerRefused(
                    f"its tools/list never ends (page {len(seen) + 1} points to "
                    f"{'a page it already gave' if cursor in seen else 'yet another'})"
                )
            seen.add(cursor)
        self.tools = tools

    async def call(self, name: str, arguments: dict[str, Any], done: threading.Event) -> Any:
        """tools/call through the running session (a task of its own on the loop)."""
        try:
            session = self._session
            if session is None or self.state != "running":
                raise NotRunningError(self.not_running())
            try:
                return await session.call_tool(name, arguments)
            except Exception as exc:
                refused, self._refused = self._refused, None
                if _connection_lost(exc):
                    # Over HTTP nothing else tells that the server went away: the lifetime
                    # task ends the session, and the next start() connects afresh.
                    self._lost = refused or f"the connection was lost ({self._describe(exc)})"
                    self._closed.set()
                    # As in live(): failed before this call's result is seen.
                    self.state, self.detail = "failed", self._redacted(self._lost)
                if refused is not None:  # the transport's reason, not the SDK's stand-in
                    raise RuntimeError(self._redacted(refused)) from None
                if self._closed.is_set() or self.state != "running":
                    raise NotRunningError(self.not_running()) from None
                raise RuntimeError(self._redacted(self._describe(exc))) from None
        finally:
            done.set()

    def _note_refused(self, why: str) -> None:
        self._refused = why

    # ------------------------------------------------------------ what is shown

    def not_running(self) -> str:
        why = (
            self.detail
            or self._lost
            or self._with_stderr("the server exited" if self._stderr else "the connection closed")
        )
        if self.state in ("not started", "stopped"):
            why = f"it is {self.state}"
        return f"MCP server {self.config.name} is not running: {self._redacted(why)}"

    def _with_stderr(self, what: str) -> str:
        line = self._stderr.last_line() if self._stderr else ""
        return f"{what} (stderr: {line})" if line else what

    def kept(self, text: str) -> str:
        """What the server said (its version, a tool's name) as it may enter a fact: valid
        Unicode, its secrets redacted."""
        return clean_text(text, self.config.secrets())

    def _redacted(self, text: str) -> str:
        if self.config.url:
            text = text.replace(self.config.url, redact_url(self.config.url))
        return redact(" ".join(text.split()), self.config.secrets())

    def _describe(self, exc: BaseException) -> str:
        exc = _leaf(exc)
        if isinstance(exc, ServerRefused):
            return str(exc)
        if isinstance(exc, FileNotFoundError) and self.config.transport == "stdio":
            return f"command not found: {self.config.command}"
        if isinstance(exc, PermissionError) and self.config.transport == "stdio":
            return f"command not executable: {self.config.command}"
        text = str(exc).strip() or type(exc).__name__
        if "Connection closed" in text and self._stderr is not None:
            return "the server exited before it answered"
        text = f"{type(exc).__name__}: {text}"
        status = self._http_status
        if status is None:
            return text
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "error"
        advice = (
            "; check the headers (credentials) configured for it"
            if status in (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN)
            else ""
        )
        return f"HTTP {status} {phrase} ({text}){advice}"


_CONNECTION_CLOSED = -32000  # mcp_types.CONNECTION_CLOSED (not imported: it loads the SDK)


def _connection_lost(exc: BaseException) -> bool:
    """A call failed because the connection is gone, not because the tool failed."""
    code = getattr(getattr(exc, "error", None), "code", None)
    text = str(exc)
    return code == _CONNECTION_CLOSED or "Session terminated" in text


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    # By duck type: BaseExceptionGroup is not a builtin on Python 3.10.
    while (inner := getattr(exc, "exceptions", None)) and isinstance(inner[0], BaseException):
        exc = inner[0]
    return exc


async def _first(*waits: Any) -> None:
    """Return when the first of the awaitables finishes; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
