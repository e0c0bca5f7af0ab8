"""The record payloads of the session file (docs/session-format.md §2): what an operation, an
attempt or a tool call did, what a run stated, what the session learned; and what every
model of the file is made of: one strict, frozen, closed base model, the field types a
line's values take, and the limits a file's numbers are believed within. The rules
across facts live in `_reducer`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ._ids import UUID7_PATTERN

FORMAT_VERSION = 2

Id = Annotated[str, StringConstraints(pattern=UUID7_PATTERN)]
Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0)]
# The largest token count or cost (USD) a usage fact is believed for: an exact JSON number
# everywhere. A file may hold a larger one (a buggy server's 2**64-1, a crafted file): it
# stays valid, and reads as no usage (docs/spec.md §4), so no sum can overflow to `inf`
# or grow past what `str()` prints (Python refuses ints of more than 4,300 digits).
MAX_REPORTED = 2**53 - 1
# The context windows a session believes (docs/spec.md §8): below 256 tokens no agent's
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


def optional(**kwargs: Any) -> Any:
    """A field that may be absent from the line; when unset it is not written at all."""
    return Field(default=None, exclude_if=_omit_none, **kwargs)


class StrictModel(BaseModel):
    """Strict (no "1" for 1), closed (unknown fields refused) and frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# The record payloads, which `session.facts` offers as their own constructors.
__all__ = [
    "AbortRequested",
    "AttemptFailed",
    "ContextWindow",
    "FileRestore",
    "KernelOpened",
    "OperationFinished",
    "OperationStarted",
    "StepAttempt",
    "SystemPrompt",
    "ToolStarted",
]

OperationKind = Literal["run", "resume", "compaction", "replay", "rewind"]
# What happens to a call of a tool that changes things: it runs, is asked first, or not.
Approval = Literal["auto", "ask", "deny"]


class RunOptions(StrictModel):
    """The options a run or a resume ran with (docs/session-format.md §2.3), which every resume of
    it uses too unless the user gives another: `approve`, the tools offered to the model
    by name, `budget` in USD for the whole run (null: no limit), `maxSteps` (each
    operation's own steps) and the `model` id."""

    approve: Approval
    tools: list[Annotated[str, Field(min_length=1)]]
    budget: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None
    maxSteps: Annotated[int, Field(ge=1)]
    model: str


# A notebook cell's id (nbformat 4.5 says 1-64 characters; a frontend may send others).
CellId = Annotated[str, Field(min_length=1, max_length=256)]


# The class is named for what it starts; its type on the line stays `runStarted`, as
# format version 2 froze it (a file a new kernel writes stays readable to every reader).
class OperationStarted(StrictModel):
    """An operation's start: a run, a resume, a compaction, a replay or a rewind
    (`operationKind`)."""

    type: Literal["runStarted"] = "runStarted"
    operationId: Id
    operationKind: OperationKind
    inputEntryId: Id | None
    resumesOperationId: Id | None = optional()
    # Absent or null in files written before it existed: the run's options are unknown.
    options: RunOptions | None = optional()
    # The notebook cell a `run` or a `replay` ran in, when its frontend said (docs/spec.md §12).
    cellId: CellId | None = optional()
    # The `run` a `replay` replays (docs/spec.md §12); no other kind names one.
    replaysOperationId: Id | None = optional()
    # The operation a `rewind` goes back to just before (docs/spec.md §17); no other kind
    # names one.
    rewindsOperationId: Id | None = optional()

    @model_validator(mode="after")
    def _kind_matches_references(self) -> OperationStarted:
        kind = self.operationKind
        if kind in ("compaction", "rewind") and self.options is not None:
            raise ValueError(f"a '{kind}' has no options (it asks no model)")
        if (kind == "replay") != (self.replaysOperationId is not None):
            raise ValueError("a 'replay' names its replaysOperationId, and only a replay does")
        if (kind == "rewind") != (self.rewindsOperationId is not None):
            raise ValueError("a 'rewind' names its rewindsOperationId, and only a rewind does")
        if self.cellId is not None and self.operationKind not in ("run", "replay"):
            raise ValueError("only a 'run' or a 'replay' names a cellId")
        if self.operationKind == "replay":
            if self.inputEntryId is not None or self.resumesOperationId is not None:
                raise ValueError("a 'replay' has inputEntryId null and no resumesOperationId")
        elif self.operationKind == "run":
            if self.inputEntryId is None or self.resumesOperationId is not None:
                raise ValueError("a 'run' names its inputEntryId and no resumesOperationId")
        elif self.operationKind == "resume":
            if self.inputEntryId is not None or self.resumesOperationId is None:
                raise ValueError("a 'resume' has inputEntryId null and names resumesOperationId")
        elif self.inputEntryId is not None or self.resumesOperationId is not None:
            raise ValueError(f"a '{kind}' has inputEntryId null and no resumesOperationId")
        return self


class StepAttempt(StrictModel):
    """One physical model request. The fact's own id is the attempt id."""

    type: Literal["stepAttempt"] = "stepAttempt"
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


class AttemptError(StrictModel):
    kind: AttemptErrorKind
    message: str
    status: int | None = optional()


class AttemptFailed(StrictModel):
    type: Literal["attemptFailed"] = "attemptFailed"
    attemptId: Id
    error: AttemptError
    retryable: bool


class ToolIdentity(StrictModel):
    name: Annotated[str, Field(min_length=1)]
    version: str
    source: Annotated[str, StringConstraints(pattern=r"^(builtin|mcp:.+)$")]


ReplayPolicy = Literal["safeRead", "never"]


class ToolStarted(StrictModel):
    """The intent: written before the tool's effect may happen."""

    type: Literal["toolStarted"] = "toolStarted"
    operationId: Id
    attemptId: Id
    toolCallId: str
    tool: ToolIdentity
    arguments: JsonObject
    replayPolicy: ReplayPolicy
    environmentIdentity: str
    resultEntryId: Id
    replayKey: Digest


class AbortRequested(StrictModel):
    type: Literal["abortRequested"] = "abortRequested"
    operationId: Id
    reason: str


OperationOutcome = Literal[
    "completed", "failed", "aborted", "interrupted", "stepLimit", "budgetLimit"
]


class OperationFinished(StrictModel):
    type: Literal["operationFinished"] = "operationFinished"
    operationId: Id
    outcome: OperationOutcome
    detail: str | None = optional()


class SystemPrompt(StrictModel):
    """The system message of the run's model requests from here on, recorded when it
    differs from the one recorded last (docs/spec.md §7)."""

    type: Literal["systemPrompt"] = "systemPrompt"
    operationId: Id
    content: str


# listing: the server's metadata stated it; refusal: a "too long" answer did; forgotten:
# the user cleared the pair's window (tokens null); truncation: the server's count of a
# request was far below what was sent, which no writer records any more (a server that
# counts only what its cache did not hold gives such counts): read, and taken as no window.
WindowSource = Literal["listing", "refusal", "forgotten", "truncation"]


class ContextWindow(StrictModel):
    """The context window this session learned for `model` at the server `baseUrl` (its
    credentials masked), so a later process need not learn it again (docs/spec.md §8);
    `tokens` null, with source `forgotten`: the user cleared it. `attemptId`: the attempt
    whose answer told it, when one did."""

    type: Literal["contextWindow"] = "contextWindow"
    baseUrl: str
    model: str
    tokens: Annotated[int, Field(ge=1)] | None
    source: WindowSource
    attemptId: Id | None = optional()

    @model_validator(mode="after")
    def _forgotten_has_no_tokens(self) -> ContextWindow:
        if (self.tokens is None) != (self.source == "forgotten"):
            raise ValueError("tokens is null exactly when the source is 'forgotten'")
        if self.source == "forgotten" and self.attemptId is not None:
            raise ValueError("a 'forgotten' window names no attemptId")
        return self


class KernelOpened(StrictModel):
    """A kernel opened the session for writing (docs/spec.md §9). `pid`, `host` and
    `startedAt` (when its process started) tell one process from another: the same three
    in two records mean the same process, whose variables live on between them.
    `kernelId` is the Jupyter kernel id (kept across a restart, so it tells no restart),
    `notebook` the notebook's file name as the kernel knew it; either null when unknown."""

    type: Literal["kernelOpened"] = "kernelOpened"
    pid: Count
    host: str
    startedAt: EpochMs
    kernelId: str | None
    notebook: str | None


class FileRestore(StrictModel):
    """A rewind is about to replace the file at `path` (workspace-relative): committed
    before the replace, so a kernel killed in between leaves a file the session knows
    about (docs/spec.md §17). `from`: the content the rewind found there, kept in the
    file store first (so a later rewind can bring it back); `to`: what it puts there
    (null: it removes the file); the modes are `st_mode & 0o7777` (null: no file)."""

    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    type: Literal["fileRestore"] = "fileRestore"
    operationId: Id
    path: Annotated[str, Field(min_length=1)]
    from_: Digest | None = Field(alias="from")
    fromMode: Annotated[int, Field(ge=0, le=0o7777)] | None
    to: Digest | None
    toMode: Annotated[int, Field(ge=0, le=0o7777)] | None


# The one list of record payloads: what a record fact may hold, and what a NewFact may commit.
RecordPayload = (
    OperationStarted
    | StepAttempt
    | AttemptFailed
    | ToolStarted
    | AbortRequested
    | OperationFinished
    | SystemPrompt
    | ContextWindow
    | KernelOpened
    | FileRestore
)
RecordBody = Annotated[RecordPayload, Field(discriminator="type")]
