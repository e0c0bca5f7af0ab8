"""Wire chat-completions responses -> the canonical `AssistantMessage` + `UsageReport`,
liberal where servers that call themselves OpenAI-compatible differ:

- reasoning arrives as `reasoning` (OpenRouter, newer vLLM) or `reasoning_content`
  (DeepSeek, vLLM, llama.cpp); a delta carrying both is counted once;
- tool calls are assembled from deltas by `index` (id and name first, `arguments`
  concatenated); a server that repeats id/name in every delta, sends a whole call at
  once, omits `index`, or re-sends the complete arguments is understood as well;
- `content: null` deltas, usage in every chunk (the last one wins), an empty `choices`
  list in the final usage chunk, `finish_reason` in a chunk of its own;
- usage without any numbers, or no usage at all, is `None` (unknown), never zero.

Unusable arguments never raise (`_text.parse_arguments`) and every text the model chose
is made valid UTF-8, so the assistant entry can always be written. An `error` object in
a 200 response (OpenRouter's upstream failures, even mid-stream) raises `ProviderError`.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..session import MAX_REPORTED, AssistantMessage, ToolCall
from ..words import clean_unicode
from ._errors import error_in_body
from ._text import encoded, get_path, parse_arguments
from ._types import (
    Completion,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallStarted,
    UsageReport,
)

# Tool calls one answer may hold. Within max_response_bytes a 45-byte call delta could
# make a million, each a builder in memory and an entry in the file; parallel calls of a
# real model number a few dozen.
MAX_TOOL_CALLS = 256

# ---------------------------------------------------------------- usage


def _count(value: object) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and math.isfinite(value):
        return max(int(value), 0)
    return None


def _money(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        amount = float(value)
    except ValueError:
        return None
    return amount if math.isfinite(amount) and amount >= 0 else None


def usage_from_wire(usage: object) -> UsageReport | None:
    """Normalize a `usage` object; None when it carries no token count or cost at all, or
    a count or cost past MAX_REPORTED (no real report comes near 2**53: a buggy server's
    2**64-1 or a hostile one's 4,300 digits is no usage, not a number to sum)."""
    if not isinstance(usage, Mapping):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    if prompt is None:
        prompt = _count(usage.get("input_tokens"))
    completion = _count(usage.get("completion_tokens"))
    if completion is None:
        completion = _count(usage.get("output_tokens"))
    reasoning = _count(get_path(usage, "completion_tokens_details", "reasoning_tokens"))
    cached = _count(get_path(usage, "prompt_tokens_details", "cached_tokens"))
    if cached is None:  # DeepSeek's own names
        cached = _count(usage.get("prompt_cache_hit_tokens"))
    cost = _money(usage.get("cost"))
    if cost is not None and usage.get("is_byok") is True:
        # OpenRouter BYOK: `cost` is OpenRouter's fee; the provider bills the rest.
        upstream = _money(get_path(usage, "cost_details", "upstream_inference_cost"))
        cost = cost + upstream if upstream is not None else cost
    if prompt is None and completion is None and cost is None:
        return None
    counts = (prompt or 0, completion or 0, reasoning or 0, cached or 0)
    if max(counts) > MAX_REPORTED or (cost is not None and cost > MAX_REPORTED):
        return None
    return UsageReport(
        input_tokens=prompt or 0,
        output_tokens=completion or 0,
        reasoning_tokens=reasoning or 0,
        cached_input_tokens=cached or 0,
        cost=cost,
    )


# ---------------------------------------------------------------- assembly


def _text(value: object) -> str | None:
    """A content field: a string, or a list of `{"type": "text", "text"}` parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [p.get("text") for p in value if isinstance(p, Mapping)]
        return "".join(p for p in parts if isinstance(p, str))
    return None


def _reasoning(delta: Mapping[str, Any]) -> str | None:
    value = _text(delta.get("reasoning"))
    return value if value is not None else _text(delta.get("reasoning_content"))


def _complete_object(text: str) -> bool:
    if not text.lstrip().startswith("{"):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class _CallBuilder:
    position: int
    id: str = ""
    id_made_up: bool = False
    name: str = ""
    pieces: list[str] = field(default_factory=list)  # joined lazily: `+=` would be quadratic
    announced: bool = False

    @property
    def arguments(self) -> str:
        if len(self.pieces) > 1:
            self.pieces[:] = ["".join(self.pieces)]
        return self.pieces[0] if self.pieces else ""

    def _ends_an_object(self) -> bool:
        for piece in reversed(self.pieces):
            if piece.strip():
                return piece.rstrip()[-1:] == "}"
        return False

    def add_arguments(self, piece: object) -> None:
        if piece is None:
            return
        if not isinstance(piece, str):  # a whole object at once
            self.pieces[:] = [encoded(piece)]
            return
        # Cheap tests first: parsing the text so far for every piece would make a long
        # streamed argument (a whole file for write_file) quadratic.
        if (
            piece.lstrip()[:1] == "{"
            and self._ends_an_object()
            and (piece == self.arguments or _complete_object(piece))
            and _complete_object(self.arguments)
        ):
            self.pieces[:] = [piece]  # the whole arguments re-sent, not a continuation
            return
        self.pieces.append(piece)

    def build(self) -> ToolCall:
        arguments, invalid = parse_arguments(self.arguments)
        return ToolCall(
            id=clean_unicode(self.id) or _new_call_id(),
            name=clean_unicode(self.name),
            arguments=arguments,
            invalidArguments=invalid,
        )


@dataclass
class CompletionAssembler:
    """Folds the `chat.completion.chunk` objects of one stream into a `Completion`.

    `add_chunk` returns the stream events the chunk produced, in order, for the caller to
    show while the answer is still arriving.
    """

    _content: list[str] = field(default_factory=list)
    _reasoning: list[str] = field(default_factory=list)
    _refusal: list[str] = field(default_factory=list)
    _calls: list[_CallBuilder] = field(default_factory=list)
    _by_index: dict[int, _CallBuilder] = field(default_factory=dict)
    _last_call: _CallBuilder | None = None
    # The usage reported so far (kept when the answer then fails: it was billed).
    usage: UsageReport | None = None
    _model: str | None = None
    _response_id: str | None = None
    finish_reason: str | None = None
    saw_choice: bool = False

    def add_chunk(self, chunk: Mapping[str, Any]) -> list[StreamEvent]:
        usage = usage_from_wire(chunk.get("usage"))
        if usage is not None:  # some servers repeat (growing) usage in every chunk
            self.usage = usage  # before the error check: an error chunk may carry it too
        if chunk.get("error") is not None:
            raise error_in_body(chunk)
        model, response_id = chunk.get("model"), chunk.get("id")
        if isinstance(model, str) and model:
            self._model = clean_unicode(model)
        if isinstance(response_id, str) and response_id:
            self._response_id = clean_unicode(response_id)
        events: list[StreamEvent] = []
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, Mapping) or choice.get("index", 0) not in (0, None):
                continue  # we never ask for n > 1
            self.saw_choice = True
            delta = choice.get("delta")
            if not isinstance(delta, Mapping):
                delta = choice.get("message")  # a server answering a stream with whole messages
            if isinstance(delta, Mapping):
                self._add_delta(delta, events)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finish_reason = clean_unicode(reason)
        return events

    def _add_delta(self, delta: Mapping[str, Any], events: list[StreamEvent]) -> None:
        reasoning = _reasoning(delta)
        if reasoning:
            self._reasoning.append(reasoning)
            events.append(ReasoningDelta(clean_unicode(reasoning)))
        content = _text(delta.get("content"))
        if content:
            self._content.append(content)
            events.append(TextDelta(clean_unicode(content)))
        refusal = _text(delta.get("refusal"))
        if refusal:
            self._refusal.append(refusal)
        calls = delta.get("tool_calls")
        for wire in calls if isinstance(calls, list) else []:
            if isinstance(wire, Mapping):
                self._add_call_delta(wire, events)

    def _builder_for(self, wire: Mapping[str, Any]) -> _CallBuilder:
        index, call_id = wire.get("index"), wire.get("id")
        call_id = call_id if isinstance(call_id, str) and call_id else None
        if isinstance(index, int) and not isinstance(index, bool):
            builder = self._by_index.get(index)
            # Some servers number parallel calls all 0 but give each its own id.
            if builder is not None and not (
                call_id and builder.id and not builder.id_made_up and builder.id != call_id
            ):
                return builder
            builder = self._new_builder()
            self._by_index[index] = builder
            return builder
        if call_id:
            for builder in self._calls:
                if builder.id == call_id:
                    return builder
            return self._new_builder()
        # Neither index nor id: a bare `arguments` piece continues the last call; a name
        # starts a new one unless it repeats the name of a call still being streamed.
        last = self._last_call
        function = wire.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if last is None or (
            isinstance(name, str)
            and name
            and (name != last.name or _complete_object(last.arguments))
        ):
            return self._new_builder()
        return last

    def _new_builder(self) -> _CallBuilder:
        if len(self._calls) >= MAX_TOOL_CALLS:
            raise ProviderError(
                f"The answer held more than {MAX_TOOL_CALLS} tool calls (a model stuck in a "
                "loop?), so it was dropped and none of them ran. Ask for fewer steps at a time.",
                kind="protocol",
                retryable=False,
            )
        builder = _CallBuilder(position=len(self._calls))
        self._calls.append(builder)
        return builder

    def _add_call_delta(self, wire: Mapping[str, Any], events: list[StreamEvent]) -> None:
        builder = self._builder_for(wire)
        self._last_call = builder
        call_id = wire.get("id")
        if isinstance(call_id, str) and call_id and not builder.id:
            builder.id = call_id  # a made-up id, once announced, is kept: it must not change
        function = wire.get("function")
        if not isinstance(function, Mapping):
            return
        name = function.get("name")
        if isinstance(name, str) and name and name != builder.name:
            builder.name += name  # set once, or streamed in pieces by a few servers
        builder.add_arguments(function.get("arguments"))
        if builder.name and not builder.announced:
            builder.announced = True
            if not builder.id:
                builder.id, builder.id_made_up = _new_call_id(), True
            shown_id, shown_name = clean_unicode(builder.id), clean_unicode(builder.name)
            events.append(ToolCallStarted(builder.position, shown_id, shown_name))

    def result(self) -> Completion:
        if not self.saw_choice:
            raise ProviderError(
                "The server's answer held no choice (no message at all); the request can be "
                "retried. If this repeats, the model may be unavailable at this provider.",
                kind="protocol",
                retryable=True,
            )
        calls = tuple(b.build() for b in self._calls if b.id or b.name or b.arguments.strip())
        message = AssistantMessage(
            role="assistant",
            content=_joined(self._content),
            reasoning=_joined(self._reasoning),
            refusal=_joined(self._refusal),
            toolCalls=calls,
            finishReason=self.finish_reason,
        )
        return Completion(message, self.usage, self._model, self._response_id)


def _joined(pieces: list[str]) -> str | None:
    """Concatenated text, or None when nothing (or only "") arrived: a streamed answer and
    the same answer non-streamed normalize to the same message."""
    text = clean_unicode("".join(pieces))
    return text or None


def completion_from_response(
    body: Mapping[str, Any], assembler: CompletionAssembler | None = None
) -> Completion:
    """A non-streamed `chat.completion` object (also used when a server ignores
    `stream: true` and answers with JSON). `assembler`: the caller's, to read the usage
    the body reported when it holds no answer."""
    assembler = CompletionAssembler() if assembler is None else assembler
    assembler.add_chunk(body)
    return assembler.result()


def events_of(completion: Completion) -> list[StreamEvent]:
    """The events a non-streamed answer would have produced, so the display is the same."""
    message = completion.message
    events: list[StreamEvent] = []
    if message.reasoning:
        events.append(ReasoningDelta(message.reasoning))
    if message.content:
        events.append(TextDelta(message.content))
    events.extend(
        ToolCallStarted(i, call.id, call.name) for i, call in enumerate(message.toolCalls)
    )
    return events
