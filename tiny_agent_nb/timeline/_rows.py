"""The rows of a timeline, which every surface renders (the notebook's HTML, the text
view, `tiny-agent-nb timeline` and its JSON), and the models a session's runs used."""

from __future__ import annotations

from dataclasses import dataclass

from ..session import SessionState

NAMED_EARLIER = 3  # earlier models named beside the latest; the rest are counted


@dataclass(frozen=True)
class ModelName:
    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider} / {self.model}"


@dataclass(frozen=True)
class SessionModels:
    """Which models a session's runs used: its `stepAttempt` records say, not its header.
    The header names what was configured when the file was created (docs/session-format.md
    §1); a notebook configured the documented way (`%load_ext`, then `%config
    TinyAgent.model = ...`) creates its session first, so its header names the offline
    demo model that no run ever asked."""

    used: tuple[ModelName, ...]  # the models its attempts asked, the latest asked first
    configured: ModelName  # the header's

    @property
    def providers(self) -> frozenset[str]:
        """The providers that answered; before any was asked, the configured one."""
        return frozenset(m.provider for m in self.used) or frozenset({self.configured.provider})

    def described(self) -> str:
        """`openai-compatible / gpt-4o`, with the earlier models when there were several."""
        if not self.used:
            return f"{self.configured} (configured when the session was created; none asked yet)"
        latest, *earlier = self.used
        if not earlier:
            return str(latest)
        named = ", ".join(str(m) for m in earlier[:NAMED_EARLIER])
        more = len(earlier) - NAMED_EARLIER
        return f"{latest} (latest of {len(self.used)} models; also {named}" + (
            f" and {more} more)" if more > 0 else ")"
        )


def session_models(state: SessionState) -> SessionModels:
    used = dict.fromkeys(ModelName(a.provider, a.model) for a in state.attempts_newest_first())
    header = state.header
    return SessionModels(tuple(used), ModelName(header.provider, header.model))


@dataclass(frozen=True)
class AttemptRow:
    id: str
    step: int
    attempt: int
    status: str  # settled | failed | interrupted | aborted | pending
    model: str
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None
    latency_ms: int | None
    error: str | None
    compaction: str | None = None  # what the attempt's compaction summarized


@dataclass(frozen=True)
class ToolRow:
    id: str
    attempt_id: str  # the model attempt whose answer asked for the call
    name: str  # the name the model called it by (`called_name`): time__get_current_time
    source: str  # the identity's source: `builtin`, `mcp:<server>`
    short_arguments: str
    arguments: str  # JSON, capped
    replay_policy: str
    status: str  # pending | completed | error | interrupted | replayed | denied
    result: str | None  # preview of the result content
    note: str | None  # what happened to it, in words, where its status does not say it
    # Usage the tool reported about its own call (an MCP tool that calls a model); None:
    # it reported nothing.
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None


@dataclass(frozen=True)
class KernelRow:
    """A kernel boundary: the kernel (a process) that wrote the runs after it, shown where
    it differs from the one that wrote the runs before (docs/spec.md §9)."""

    id: str  # its kernelOpened record
    number: int  # 1-based, counting changes of process in file order: "kernel 2"
    opened_at: int  # when it opened the session (epoch ms)
    started_at: int  # when its process started
    pid: int
    host: str
    kernel_id: str | None
    notebook: str | None
    notice: str | None  # what the model was told about it, once it was


@dataclass(frozen=True)
class RunRow:
    id: str
    number: int  # 1-based, in file order: "run 3"
    kind: str
    # the number of the run a resume continues, a replay replays, or a rewind goes before
    resumes: int | None
    status: str
    prompt: str | None  # its first line (`first_line`)
    started_at: int
    detail: str | None
    attempts: tuple[AttemptRow, ...]
    tools: tuple[ToolRow, ...]
    hidden_attempts: int
    hidden_tools: int
    cost: float | None  # with `unpriced`, for words.money (see `priced`)
    unpriced: int
    input_tokens: int
    output_tokens: int
    kernel: KernelRow | None = None  # a kernel boundary before this run
    usage_records: int = 0  # usage facts of its attempts and tools: 0, none reported
    rewound_by: int | None = None  # the rewind that took it off the conversation's path
    follows: int | None = None  # the first run after a rewind: the run it continues (0: none)

    def steps(self) -> list[tuple[AttemptRow | None, tuple[ToolRow, ...]]]:
        """Each shown attempt with the tool calls its answer asked for, in file order;
        first (None, calls) for the shown calls of attempts not shown (earlier ones)."""
        shown = {a.id for a in self.attempts}
        earlier = tuple(t for t in self.tools if t.attempt_id not in shown)
        by_attempt: list[tuple[AttemptRow | None, tuple[ToolRow, ...]]] = [
            (a, tuple(t for t in self.tools if t.attempt_id == a.id)) for a in self.attempts
        ]
        return [(None, earlier), *by_attempt] if earlier else by_attempt


@dataclass(frozen=True)
class Totals:
    runs: int
    attempts: int
    tool_intents: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cached_input_tokens: int
    cost: float | None
    unpriced: int  # usage facts with unknown cost
    usage_records: int = 0  # usage facts in the session: 0, none reported


@dataclass(frozen=True)
class Timeline:
    session_id: str
    path: str
    models: SessionModels  # what its runs used, not its header
    runs: tuple[RunRow, ...]  # the current page, oldest first
    page: int
    pages: int
    totals: Totals
    torn_tail_bytes: int
    # The latest kernel when it has written no run yet (after the last run, or alone).
    kernel: KernelRow | None = None
