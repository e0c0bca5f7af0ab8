"""Pydantic models of the session file (docs/session-format.md §1-§2): the header, the entry
payloads, usage, and the three fact envelopes a line holds.

Every model is strict, frozen and closed (unknown fields are rejected: `StrictModel`), so
a line that validates here has exactly the shape the format promises. The record payloads
are in `_records`; cross-fact rules (seq, ids, references) live in `_reducer`; this module
only knows what one line may look like.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import ConfigDict, Discriminator, Field, Tag, TypeAdapter, model_validator

from ._records import Count, EpochMs, Id, JsonObject, RecordBody, StrictModel, optional

# ---------------------------------------------------------------- header


class Header(StrictModel):
    kind: Literal["header"]
    version: Literal[2]
    id: Id
    createdAt: EpochMs
    cwd: str
    provider: str
    model: str
    environmentIdentity: str


# ---------------------------------------------------------------- entries


class UserMessage(StrictModel):
    role: Literal["user"]
    content: str


class ToolCall(StrictModel):
    """One tool call of an assistant message; `arguments` is the parsed JSON object.

    When the model sent arguments that are not a JSON object, `arguments` is `{}` and
    `invalidArguments` keeps what was sent, so the loop answers with an error result
    the model sees (never a crash, never a guess).
    """

    id: Annotated[str, Field(min_length=1)]
    name: str
    arguments: JsonObject
    invalidArguments: str | None = optional()


class AssistantMessage(StrictModel):
    role: Literal["assistant"]
    content: str | None
    reasoning: str | None
    refusal: str | None
    toolCalls: tuple[ToolCall, ...]
    finishReason: str | None


ToolOutcome = Literal["completed", "error", "interrupted", "replayed", "denied"]


class ToolMessage(StrictModel):
    role: Literal["tool"]
    toolCallId: str
    content: str
    isError: bool


class UserEntry(StrictModel):
    """A prompt as accepted. `userCells`: what the user ran in the notebook since the
    previous prompt, as it was sent before the prompt (docs/spec.md §6); absent and null
    mean none (files written before it existed)."""

    tag: ClassVar[str] = "user"
    type: Literal["message"]
    message: UserMessage
    userCells: str | None = optional()


class AssistantEntry(StrictModel):
    """The settled answer of one stepAttempt (`attemptId` points back to it)."""

    tag: ClassVar[str] = "assistant"
    type: Literal["message"]
    attemptId: Id
    message: AssistantMessage


class ToolResultEntry(StrictModel):
    """The result of one toolStarted; its fact id is the intent's reserved resultEntryId."""

    tag: ClassVar[str] = "tool"
    type: Literal["message"]
    toolStartedId: Id
    outcome: ToolOutcome
    message: ToolMessage


class CompactionEntry(StrictModel):
    """A checkpoint: entries up to `throughEntryId` are replaced by `summary` in the
    active context (docs/spec.md §3). `attemptId`: the model attempt that wrote the summary,
    which this entry settles as an assistant entry would; `tokensBefore` and
    `tokensAfter`: the context's size before it and after it (estimates). Each may be
    absent or null (files written before they existed)."""

    tag: ClassVar[str] = "compaction"
    type: Literal["compaction"] = "compaction"
    summary: str
    throughEntryId: Id
    attemptId: Id | None = optional()
    tokensBefore: Count | None = optional()
    tokensAfter: Count | None = optional()


class KernelNotice(StrictModel):
    """What the model was told when the conversation went on in another kernel than the
    one that wrote it (docs/spec.md §9): sent as a user message. `kernelOpenedId`
    names the kernel it was told about, the latest `kernelOpened` of the file."""

    tag: ClassVar[str] = "kernelNotice"
    type: Literal["kernelNotice"] = "kernelNotice"
    kernelOpenedId: Id
    message: UserMessage


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


# The one list of entry payloads: what an entry fact may hold, and what a NewFact may commit.
EntryPayload = UserEntry | AssistantEntry | ToolResultEntry | CompactionEntry | KernelNotice
# The entries a line tells apart by their `type` alone: the messages share theirs.
_TYPED_ENTRIES = frozenset(
    m.tag for m in get_args(EntryPayload) if m.model_fields["type"].default == m.tag
)
if TYPE_CHECKING:
    EntryBody = EntryPayload
else:  # each payload tagged with its `tag`, which `_entry_tag` reads off a line
    EntryBody = Annotated[
        Union[tuple(Annotated[m, Tag(m.tag)] for m in get_args(EntryPayload))],  # noqa: UP007
        Discriminator(_entry_tag),
    ]


# ---------------------------------------------------------------- usage


class Usage(StrictModel):
    """Tokens and cost of exactly one stepAttempt or one toolStarted."""

    attemptId: Id | None = optional()
    toolStartedId: Id | None = optional()
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


class EntryFact(StrictModel):
    kind: Literal["entry"]
    seq: Annotated[int, Field(ge=1)]
    id: Id
    at: EpochMs
    entry: EntryBody


class RecordFact(StrictModel):
    kind: Literal["record"]
    seq: Annotated[int, Field(ge=1)]
    id: Id
    at: EpochMs
    record: RecordBody


class UsageFact(StrictModel):
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
