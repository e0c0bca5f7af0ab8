"""Pydantic models of the session file (docs/spec.md §2-§3): header, fact envelopes and payloads.

Every model is strict, frozen and closed (unknown fields are rejected), so a line that
validates here has exactly the shape the format promises. Cross-fact rules (seq, ids,
references) live in `_reducer`; this module only knows what one line may look like.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    TypeAdapter,
    model_validator,
)

from ._ids import UUID7_PATTERN

FORMAT_VERSION = 2

Id = Annotated[str, StringConstraints(pattern=UUID7_PATTERN)]
Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0)]
# The largest token count or cost (USD) a usage fact is believed for: an exact JSON number
# everywhere. A file may hold a larger one (a buggy server's 2**64-1, a crafted file): it
# stays valid, and reads as no usage (docs/spec.md §11), so no sum can overflow to `inf`
# or grow past what `str()` prints (Python refuses ints of more than 4,300 digits).
MAX_REPORTED = 2**53 - 1
# The context windows a session believes (docs/spec.md §17): below 256 tokens no agent's
# system prompt fits, 100M is past every model served today. A window a server states
# outside them is not recorded; a record outside them (a crafted file) reads as none.
MIN_WINDOW = 256
MAX_WINDOW = 100_000_000
# 9999-12-31T23:59:59.999Z: every renderer can show it (datetime stops at year 9999) and it
# is an exact JavaScript number (< 2**53). A larger `at` is no time, and so corruption.
MAX_EPOCH_MS = 253_402_300_799_999
EpochMs = Annotated[int, Field(ge=0, le=MAX_EPOCH_MS)]
JsonObject = dict[str, Any]


def _omit_none(value: object) -> bool:
    return value is None


def _optional(**kwargs: Any) -> Any:
    """A field that may be absent from the line; when unset it is not written at all."""
    return Field(default=None, exclude_if=_omit_none, **kwargs)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# ---------------------------------------------------------------- header


class Header(_Model):
    kind: Literal["header"]
    version: Literal[2]
    id: Id
    createdAt: EpochMs
    cwd: str
    provider: str
    model: str
    environmentIdentity: str


# ---------------------------------------------------------------- entries


class UserMessage(_Model):
    role: Literal["user"]
    content: str


class ToolCall(_Model):
    """One tool call of an assistant message; `arguments` is the parsed JSON object.

    When the model sent arguments that are not a JSON object, `arguments` is `{}` and
    `invalidArguments` keeps what was sent, so the loop answers with an error result
    the model sees (never a crash, never a guess).
    """

    id: Annotated[str, Field(min_length=1)]
    name: str
    arguments: JsonObject
    invalidArguments: str | None = _optional()


class AssistantMessage(_Model):
    role: Literal["assistant"]
    content: str | None
    reasoning: str | None
    refusal: str | None
    toolCalls: tuple[ToolCall, ...]
    finishReason: str | None


ToolOutcome = Literal["completed", "error", "interrupted", "replayed", "denied"]


class ToolMessage(_Model):
    role: Literal["tool"]
    toolCallId: str
    content: str
    isError: bool


class UserEntry(_Model):
    """A prompt as accepted. `userCells`: what the user ran in the notebook since the
    previous prompt, as it was sent before the prompt (docs/spec.md §15); absent and null
    mean none (files written before it existed)."""

    tag: ClassVar[str] = "user"
    type: Literal["message"]
    message: UserMessage
    userCells: str | None = _optional()


class AssistantEntry(_Model):
    """The settled answer of one stepAttempt (`attemptId` points back to it)."""

    tag: ClassVar[str] = "assistant"
    type: Literal["message"]
    attemptId: Id
    message: AssistantMessage


class ToolResultEntry(_Model):
    """The result of one toolStarted; its fact id is the intent's reserved resultEntryId."""

    tag: ClassVar[str] = "tool"
    type: Literal["message"]
    toolStartedId: Id
    outcome: ToolOutcome
    message: ToolMessage


class CompactionEntry(_Model):
    """A checkpoint: entries up to `throughEntryId` are replaced by `summary` in the
    active context (docs/spec.md §10). `attemptId`: the model attempt that wrote the summary,
    which this entry settles as an assistant entry would; `tokensBefore` and
    `tokensAfter`: the context's size before it and after it (estimates). Each may be
    absent or null (files written before they existed)."""

    tag: ClassVar[str] = "compaction"
    type: Literal["compaction"]
    summary: str
    throughEntryId: Id
    attemptId: Id | None = _optional()
    tokensBefore: Count | None = _optional()
    tokensAfter: Count | None = _optional()


class KernelNotice(_Model):
    """What the model was told when the conversation went on in another kernel than the
    one that wrote it (docs/spec.md §18): sent as a user message. `kernelOpenedId`
    names the kernel it was told about, the latest `kernelOpened` of the file."""

    tag: ClassVar[str] = "kernelNotice"
    type: Literal["kernelNotice"]
    kernelOpenedId: Id
    message: UserMessage


_TYPED_ENTRIES = frozenset({"compaction", "kernelNotice"})


def _entry_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        entry_type = value.get("type")
        if isinstance(entry_type, str) and entry_type in _TYPED_ENTRIES:
            return entry_type
        message = value.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        return role if isinstance(role, str) else None
    tag = getattr(value, "tag", None)
    return tag if isinstance(tag, str) else None


EntryBody = Annotated[
    Annotated[UserEntry, Tag("user")]
    | Annotated[AssistantEntry, Tag("assistant")]
    | Annotated[ToolResultEntry, Tag("tool")]
    | Annotated[CompactionEntry, Tag("compaction")]
    | Annotated[KernelNotice, Tag("kernelNotice")],
    Discriminator(_entry_tag),
]


# ---------------------------------------------------------------- records


OperationKind = Literal["run", "resume", "compaction"]


class RunStarted(_Model):
    type: Literal["runStarted"]
    operationId: Id
    operationKind: OperationKind
    inputEntryId: Id | None
    resumesOperationId: Id | None = _optional()

    @model_validator(mode="after")
    def _kind_matches_references(self) -> RunStarted:
        if self.operationKind == "run":
            if self.inputEntryId is None or self.resumesOperationId is not None:
                raise ValueError("a 'run' names its inputEntryId and no resumesOperationId")
        elif self.operationKind == "resume":
            if self.inputEntryId is not None or self.resumesOperationId is None:
                raise ValueError("a 'resume' has inputEntryId null and names resumesOperationId")
        elif self.inputEntryId is not None or self.resumesOperationId is not None:
            raise ValueError("a 'compaction' has inputEntryId null and no resumesOperationId")
        return self


class StepAttempt(_Model):
    """One physical model request. The fact's own id is the attempt id."""

    type: Literal["stepAttempt"]
    operationId: Id
    step: Annotated[int, Field(ge=1)]
    attempt: Annotated[int, Field(ge=1)]
    provider: str
    model: str
    configurationDigest: Digest


# contextLength: the server said the request does not fit the model's context window.
AttemptErrorKind = Literal[
    "http", "timeout", "network", "protocol", "contextLength", "aborted", "interrupted"
]


class AttemptError(_Model):
    kind: AttemptErrorKind
    message: str
    status: int | None = _optional()


class AttemptFailed(_Model):
    type: Literal["attemptFailed"]
    attemptId: Id
    error: AttemptError
    retryable: bool


class ToolIdentity(_Model):
    name: Annotated[str, Field(min_length=1)]
    version: str
    source: Annotated[str, StringConstraints(pattern=r"^(builtin|mcp:.+)$")]


ReplayPolicy = Literal["safeRead", "never"]


class ToolStarted(_Model):
    """The intent: written before the tool's effect may happen."""

    type: Literal["toolStarted"]
    operationId: Id
    attemptId: Id
    toolCallId: str
    tool: ToolIdentity
    arguments: JsonObject
    replayPolicy: ReplayPolicy
    environmentIdentity: str
    resultEntryId: Id
    replayKey: Digest


class AbortRequested(_Model):
    type: Literal["abortRequested"]
    operationId: Id
    reason: str


OperationOutcome = Literal[
    "completed", "failed", "aborted", "interrupted", "stepLimit", "budgetLimit"
]


class OperationFinished(_Model):
    type: Literal["operationFinished"]
    operationId: Id
    outcome: OperationOutcome
    detail: str | None = _optional()


class SystemPrompt(_Model):
    """The system message of the run's model requests from here on, recorded when it
    differs from the one recorded last (docs/spec.md §16)."""

    type: Literal["systemPrompt"]
    operationId: Id
    content: str


# listing: the server's metadata stated it; refusal: a "too long" answer did; truncation:
# the server read far fewer tokens than were sent (it cut the prompt without a word).
WindowSource = Literal["listing", "refusal", "truncation"]


class ContextWindow(_Model):
    """The context window this session learned for `model` at the server `baseUrl` (its
    credentials masked), so a later process need not learn it again (docs/spec.md §17).
    `attemptId`: the attempt whose answer told it, when one did."""

    type: Literal["contextWindow"]
    baseUrl: str
    model: str
    tokens: Annotated[int, Field(ge=1)]
    source: WindowSource
    attemptId: Id | None = _optional()


class KernelOpened(_Model):
    """A kernel opened the session for writing (docs/spec.md §18). `pid`, `host` and
    `startedAt` (when its process started) tell one process from another: the same three
    in two records mean the same process, whose variables live on between them.
    `kernelId` is the Jupyter kernel id (kept across a restart, so it tells no restart),
    `notebook` the notebook's file name as the kernel knew it; either null when unknown."""

    type: Literal["kernelOpened"]
    pid: Count
    host: str
    startedAt: EpochMs
    kernelId: str | None
    notebook: str | None


RecordBody = Annotated[
    RunStarted
    | StepAttempt
    | AttemptFailed
    | ToolStarted
    | AbortRequested
    | OperationFinished
    | SystemPrompt
    | ContextWindow
    | KernelOpened,
    Field(discriminator="type"),
]


# ---------------------------------------------------------------- usage


class Usage(_Model):
    """Tokens and cost of exactly one stepAttempt or one toolStarted."""

    attemptId: Id | None = _optional()
    toolStartedId: Id | None = _optional()
    inputTokens: Count
    outputTokens: Count
    reasoningTokens: Count
    cachedInputTokens: Count
    cost: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None

    @model_validator(mode="after")
    def _one_target(self) -> Usage:
        if (self.attemptId is None) == (self.toolStartedId is None):
            raise ValueError("usage names exactly one of attemptId or toolStartedId")
        return self

    @property
    def target_id(self) -> str:
        target = self.attemptId if self.attemptId is not None else self.toolStartedId
        assert target is not None
        return target


# ---------------------------------------------------------------- envelopes


class EntryFact(_Model):
    kind: Literal["entry"]
    seq: Annotated[int, Field(ge=1)]
    id: Id
    at: EpochMs
    entry: EntryBody


class RecordFact(_Model):
    kind: Literal["record"]
    seq: Annotated[int, Field(ge=1)]
    id: Id
    at: EpochMs
    record: RecordBody


class UsageFact(_Model):
    kind: Literal["usage"]
    seq: Annotated[int, Field(ge=1)]
    id: Id
    at: EpochMs
    usage: Usage


Fact = Annotated[EntryFact | RecordFact | UsageFact, Field(discriminator="kind")]
FactList = Annotated[list[Fact], Field(min_length=1)]

HEADER_ADAPTER: TypeAdapter[Header] = TypeAdapter(Header)
# perf: register row "fact-string-cache" (docs/benchmarks.md)
# Only keys go through pydantic's process-wide cache of short strings: with every value
# in it, decoding a session's lines (a load, the context's build) left thousands of ids
# alive in the cache for the life of the kernel.
_KEYS_CACHED = ConfigDict(cache_strings="keys")
FACT_ADAPTER: TypeAdapter[Fact] = TypeAdapter(Fact, config=_KEYS_CACHED)
FACT_LIST_ADAPTER: TypeAdapter[list[Fact]] = TypeAdapter(FactList, config=_KEYS_CACHED)
