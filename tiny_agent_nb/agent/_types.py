"""What the loop's callers see: its configuration, the provider and observer it is given,
and what a run or a recovery returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._exceptions import TinyAgentError
from ..provider import Completion, ProviderConfig, ProviderError, StreamEvent
from ..provider import messages as m
from ..session import Approval, OperationOutcome, ToolCall, ToolIntent
from ..tools import ToolOutput, ToolSchema
from ._reasons import StopReason
from ._system_prompt import DEFAULT_SYSTEM_PROMPT

if TYPE_CHECKING:
    from ._compaction import Compacted


class ChatProvider(Protocol):
    """What the loop needs from a provider (tiny_agent_nb.provider.Provider fits): one
    request of `context`, provider-neutral messages it encodes in its own wire format."""

    def complete(
        self,
        context: m.Context,
        tools: Sequence[ToolSchema],
        *,
        on_event: Callable[[StreamEvent], None] | None = None,
        stream: bool | None = None,
    ) -> Completion: ...


class LoopObserver:
    """UI hooks; every method is optional. Facts themselves are observed on the store."""

    def on_stream(self, event: StreamEvent) -> None: ...
    def on_retry(self, error: ProviderError, delay: float) -> None: ...
    # a call about to be committed as started: the last moment a stop leaves it unstarted
    def on_tool_ready(self, call: ToolCall) -> None: ...
    def on_tool_start(self, call: ToolCall, arguments: Mapping[str, Any]) -> None: ...
    # just before the operation's end is committed: a KeyboardInterrupt raised here (a
    # Stop press taken before) ends it aborted
    def on_closing(self) -> None: ...
    def on_tool_end(self, call: ToolCall, output: ToolOutput, outcome: str) -> None: ...
    # one line the user should see (unknown cost, a context window learned)
    def on_notice(self, text: str) -> None: ...
    def on_compaction(self, compacted: Compacted) -> None: ...


# The loop's defaults, in one place: LoopConfig's and TinyAgent's (notebook/_config.py).
DEFAULT_MAX_STEPS = 25  # model steps per run before it stops (stepLimit)
DEFAULT_COMPACT_THRESHOLD = 0.8  # part of the window past which a run compacts first
DEFAULT_KEEP_TAIL_TOKENS = 8000  # newest tokens a compaction keeps verbatim
# Tools that change things are asked about first; with no way to ask, they do not run.
DEFAULT_APPROVAL: Approval = "ask"


@dataclass(frozen=True)
class LoopConfig:
    # Into each stepAttempt and its configurationDigest; its base URL and model key the
    # windows the session learns.
    provider: ProviderConfig
    # What the digest covers of the MCP servers offered (ServerConfig.digest_material)
    mcp_servers: Sequence[Mapping[str, Any]] = ()
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_steps: int = DEFAULT_MAX_STEPS
    approval: Approval = DEFAULT_APPROVAL
    budget: float | None = None  # USD per run (its resume chain included); None: no limit
    # tokens: TinyAgent.context_window; None: learned, listed, else the default (_window)
    context_window: int | None = None
    listed_window: int | None = None  # what the server's metadata states, if asked
    compact_threshold: float = DEFAULT_COMPACT_THRESHOLD
    keep_tail_tokens: int = DEFAULT_KEEP_TAIL_TOKENS


@dataclass(frozen=True)
class RunResult:
    operation_id: str
    outcome: OperationOutcome
    text: str | None = None  # the final assistant content
    detail: str | None = None  # why it failed / stopped (recorded: the file's words)
    # The limit that stopped it, with its figures: each surface says what to do next.
    reason: StopReason | None = None


@dataclass(frozen=True)
class RecoveryReport:
    operation_id: str
    replayed: tuple[ToolIntent, ...]
    interrupted: tuple[ToolIntent, ...]
    failed_attempts: int
    # Of `interrupted`: calls of a tool whose processes may outlive a dead kernel
    # (`Tool.may_outlive_kernel`), so what they started may still be running.
    may_still_run: tuple[ToolIntent, ...] = ()


class AgentError(TinyAgentError):
    """A request the loop cannot serve (resume with nothing to resume), or a run or
    recovery it could not record as settled. `reason`: why, when the engine has one."""

    def __init__(self, message: str, *, reason: StopReason | None = None) -> None:
        super().__init__(message)
        self.reason = reason
