"""What the loop's callers see: its configuration, the provider and observer it is given,
and what a run or a recovery returns.

Why the engine stopped a run is data too: which limit, and its figures. The engine
states; the surfaces advise. `statement()` names no surface: it is the run's recorded
detail. `RunResult.reason` (and `NoRoom.reason`) carries the reason itself, from which
each surface says what to do next in its own words (notebook/_report.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .._exceptions import TinyAgentError
from ..provider import Completion, ProviderConfig, ProviderError, StreamEvent
from ..provider import messages as m
from ..session import Approval, OperationOutcome, ToolCall, ToolIntent
from ..tools import ToolOutput, ToolSchema
from ..words import usd  # the one money format (docs/glossary.md)
from ._system_prompt import DEFAULT_SYSTEM_PROMPT
from ._window import WindowOrigin, describe_origin

if TYPE_CHECKING:
    from ._compaction import Compacted


@dataclass(frozen=True)
class BudgetReached:
    """The run's spend (its resume chain's) is at or past its budget."""

    budget: float  # USD
    spent: float  # USD, of the priced requests
    unknown: int  # requests of unknown cost (not in `spent`)
    operations: int  # in the chain: 1 for a run never resumed
    not_run: int  # tool calls of the last answer the stop leaves unrun

    def statement(self) -> str:
        whose = "this run" if self.operations == 1 else f"this run ({self.operations} operations)"
        calls = "tool call" if self.not_run == 1 else "tool calls"
        return (
            f"budget {usd(self.budget)} reached: {whose} spent {usd(self.spent)}"
            + (f", plus {self.unknown} of unknown cost" if self.unknown else "")
            + (f"; {self.not_run} {calls} of the last answer did not run" if self.not_run else "")
        )


@dataclass(frozen=True)
class StepsReached:
    """The run took its `max_steps` model steps."""

    max_steps: int

    def statement(self) -> str:
        steps = self.max_steps
        return f"stopped after {steps} model step{'s' * (steps != 1)} (max_steps)"


@dataclass(frozen=True)
class Refused:
    """A request the server refused as too long, in tokens."""

    request: int  # the server's count when it gave one, else the estimate of what was sent
    fixed: int  # what every request carries: the system prompt and the tool definitions
    window: int | None  # the window the server said, if any


@dataclass(frozen=True)
class ContextFull:
    """The request does not fit the model's context window: `fixed`, what every request
    carries leaves no room; `conversation`, not even after compacting. `refused`: the
    refusal that made the run compact, if one did: a request under the window (configured
    larger than the server's, or the default) is said as that refusal, so that no figure
    contradicts another."""

    what: Literal["fixed", "conversation"]
    window: int  # tokens
    origin: WindowOrigin  # where that number comes from (configured, a refusal...)
    cause: str  # the compaction's or the server's words
    refused: Refused | None = None

    def statement(self) -> str:
        window = f"{self.window} tokens, {describe_origin(self.origin)}"
        r = self.refused
        if r is not None and r.request < self.window:
            said = f" (its window: {r.window} tokens)" if r.window is not None else ""
            return (
                f"the server refused a request of about {r.request} tokens (the system prompt "
                f"and the tool definitions about {r.fixed} of them) as too long{said}, though "
                f"the model's context window is {window}: compacting under it did not make "
                f"room: {self.cause}. Everything is kept in the session"
            )
        after = "" if self.what == "fixed" else " even after compacting"
        return (
            f"the conversation does not fit the model's context window ({window})"
            f"{after}: {self.cause}. Everything is kept in the session"
        )


@dataclass(frozen=True)
class FixedFill:
    """No compaction can make room: what every request carries alone (the system prompt and
    the tool definitions) is not under the limit a compaction must bring the context under."""

    fixed: int  # tokens the system prompt and the tool definitions take
    limit: int  # tokens a compaction must bring the context under: `threshold` of the window
    threshold: float  # share of the window
    window: int  # tokens
    freeable: int  # tokens of conversation a compaction could summarize away, at most

    def statement(self) -> str:
        return (
            f"the system prompt and the definitions of the tools offered alone take about "
            f"{self.fixed} tokens, not under {self.limit} ({self.threshold:g} of the window of "
            f"{self.window} tokens), so no summary of the conversation can make room: it "
            f"could free about {self.freeable} tokens at most"
        )


@dataclass(frozen=True)
class NoCleanCut:
    """No compaction can make room: the newest part of the conversation, kept verbatim,
    leaves nothing before it that ends cleanly (every tool call with its result)."""

    kept: int  # tokens the newest part kept verbatim may take (at most `share` of the window)
    share: float  # of the window: the most the part kept verbatim takes
    window: int  # tokens
    conversation: int  # tokens of the conversation since the last compaction (or the start)

    def statement(self) -> str:
        return (
            f"no part of the conversation can be summarized: keeping the newest {self.kept} "
            f"tokens verbatim (at most {self.share:.0%} of the window of {self.window} tokens) "
            "leaves nothing before them that ends cleanly (every tool call with its result); "
            f"the conversation since the last compaction takes about {self.conversation} tokens"
        )


NoRoomReason = FixedFill | NoCleanCut
"""Why no compaction can make room in the context window (`NoRoom.reason`)."""

StopReason = BudgetReached | StepsReached | ContextFull | FixedFill | NoCleanCut


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
