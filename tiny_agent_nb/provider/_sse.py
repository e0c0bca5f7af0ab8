"""Incremental Server-Sent Events decoder (the WHATWG `text/event-stream` rules).

Bytes arrive in whatever pieces the network hands over: a `data:` line, a UTF-8 character
or a CRLF pair may be split across two chunks. `SSEDecoder.feed` keeps the unfinished
line and returns only complete events; `SSEDecoder.flush` is called once at end of stream.

Liberal where servers differ: `data:` with or without the space, LF / CRLF / CR line
ends, comment lines (OpenRouter's `: OPENROUTER PROCESSING` keep-alives), `event:`
fields, a byte-order mark, and a last event whose blank line never came (the connection
closed right after it) is still delivered by `flush`. `id:` and `retry:` are ignored: a
chat completion is never resumed.
"""

from __future__ import annotations

from dataclasses import dataclass

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
