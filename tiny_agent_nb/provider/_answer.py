"""A successful response's body -> `Completion`: SSE or JSON, whichever arrived.

The bytes come already decoded and metered (size and time limits) by the client; what
is not a chat completion (HTML, broken JSON, events that are not objects) is a
`ProviderError` from `_errors`, and the chunks themselves are assembled by `_normalize`.

Server-Sent Events are decoded incrementally (`SSEDecoder`, the WHATWG
`text/event-stream` rules): a `data:` line, a UTF-8 character or a CRLF pair may be
split across two chunks. Liberal where servers differ: `data:` with or without the
space, LF / CRLF / CR line ends, comment lines (OpenRouter's `: OPENROUTER PROCESSING`
keep-alives), `event:` fields, a byte-order mark, and a last event whose blank line never
came (the connection closed right after it). `id:` and `retry:` are ignored: a chat
completion is never resumed.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import empty_stream, ended_early, not_an_answer
from ._normalize import CompletionAssembler, completion_from_response, events_of
from ._types import Completion, ProviderConfig, StreamEvent

EventSink = Callable[[StreamEvent], None]


def read_answer(
    config: ProviderConfig,
    headers: Mapping[str, str],
    chunks: Iterator[bytes],
    on_event: EventSink,
    assembler: CompletionAssembler,
) -> Completion:
    """The completion in a successful response's body, SSE or JSON (whichever the
    server sent, whatever its content type says), its events given to `on_event`.
    `assembler` folds the chunks; the caller reads the usage it saw when this raises."""
    content_type = headers.get("content-type", "").lower()
    if "event-stream" in content_type:
        return _read_stream(config, chunks, on_event, assembler)
    if "json" in content_type:
        return _read_json(config, b"".join(chunks), on_event, content_type, assembler)
    # No or odd content type (some local servers): look at the first bytes.
    first = next((chunk for chunk in chunks if chunk.strip()), b"")
    start = first.lstrip()[:1]
    if start == b"{":
        raw = first + b"".join(chunks)
        return _read_json(config, raw, on_event, content_type, assembler)
    if start in (b"", b"<"):
        what = "an empty body" if not start else "an HTML page"
        raise not_an_answer(config, what, retryable=not start)
    return _read_stream(config, itertools.chain([first], chunks), on_event, assembler)


def _read_json(
    config: ProviderConfig,
    raw: bytes,
    on_event: EventSink,
    content_type: str,
    assembler: CompletionAssembler,
) -> Completion:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # nested deeper than the decoder goes
        html = "html" in content_type or raw.lstrip()[:1] == b"<"
        what = "an HTML page" if html else "a body that is not valid JSON"
        raise not_an_answer(config, what, retryable=not html) from None
    if not isinstance(body, dict):
        raise not_an_answer(config, "JSON that is not an object", retryable=False)
    completion = completion_from_response(body, assembler)
    for event in events_of(completion):
        on_event(event)
    return completion


def _read_stream(
    config: ProviderConfig,
    chunks: Iterator[bytes],
    on_event: EventSink,
    assembler: CompletionAssembler,
) -> Completion:
    done = False
    for event in _sse_events(chunks):
        for chunk in _chunks_of(config, event):
            if chunk is None:
                done = True
                break
            for stream_event in assembler.add_chunk(chunk):
                on_event(stream_event)
        if done:
            break
    if assembler.saw_choice and not done and assembler.finish_reason is None:
        raise ended_early(config)
    if not assembler.saw_choice:
        raise empty_stream(config)
    return assembler.result()


def _chunks_of(config: ProviderConfig, event: SSEEvent) -> list[Mapping[str, Any] | None]:
    """The JSON objects of one SSE event; None stands for `[DONE]`. A server that
    separates events by single newlines yields several data lines in one event."""
    data = event.data.strip()
    if not data:
        return []
    if event.is_done:
        return [None]
    try:
        values: list[object] = [json.loads(data)]
    except RecursionError:
        raise not_an_answer(config, "a stream event nested too deeply", retryable=True) from None
    except ValueError:
        values = []
        for line in (line.strip() for line in data.splitlines()):
            if line == "[DONE]":
                values.append(None)
            elif line:
                try:
                    values.append(json.loads(line))
                except (ValueError, RecursionError):
                    raise not_an_answer(
                        config, "a stream event that is not JSON", retryable=True
                    ) from None
    out: list[Mapping[str, Any] | None] = []
    for value in values:
        if value is not None and not isinstance(value, dict):
            raise not_an_answer(config, "a stream event that is not an object", retryable=True)
        if event.event == "error" and value is not None and "error" not in value:
            out.append({"error": value})  # `event: error` with the error as the data
        else:
            out.append(value)
    return out


def _sse_events(chunks: Iterator[bytes]) -> Iterator[SSEEvent]:
    decoder = SSEDecoder()
    for chunk in chunks:
        yield from decoder.feed(chunk)
    yield from decoder.flush()


# ---------------------------------------------------------------- SSE

DONE = "[DONE]"


@dataclass(frozen=True)
class SSEEvent:
    data: str
    event: str | None = None  # the `event:` field; None means the default "message"

    @property
    def is_done(self) -> bool:
        """OpenAI's end-of-stream sentinel `data: [DONE]`."""
        return self.data.strip() == DONE


class SSEDecoder:
    """Feed raw bytes, get complete events. One decoder per response."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer already known to hold no line end
        self._started = False
        self._data: list[str] = []
        self._event: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buffer += chunk
        return self._drain(final=False)

    def flush(self) -> list[SSEEvent]:
        """End of stream: the unterminated last line and a pending event are delivered."""
        events = self._drain(final=True)
        if self._buffer:
            self._line(bytes(self._buffer), events)
            self._buffer.clear()
        self._dispatch(events)
        return events

    def _drain(self, *, final: bool) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        buf = self._buffer
        start = 0
        pos = self._scanned
        while True:
            lf = buf.find(b"\n", pos)
            cr = buf.find(b"\r", pos, lf if lf >= 0 else len(buf))
            if cr >= 0:
                if cr + 1 == len(buf) and not final:
                    pos = cr  # a CR at the very end may be the first half of CRLF
                    break
                end, pos = cr, cr + (2 if buf[cr + 1 : cr + 2] == b"\n" else 1)
            elif lf >= 0:
                end, pos = lf, lf + 1
            else:
                pos = len(buf)
                break
            self._line(bytes(buf[start:end]), events)
            start = pos
        del buf[:start]
        self._scanned = pos - start
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not self._started:
            self._started = True
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        line = raw.decode("utf-8", errors="replace")
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value or None
        # `id:`, `retry:` and unknown fields are ignored

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:
            events.append(SSEEvent("\n".join(self._data), self._event))
        self._data = []
        self._event = None
