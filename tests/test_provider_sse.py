"""The SSE decoder gives the same events however the bytes are cut into chunks."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from tiny_agent_nb.provider._answer import SSEDecoder, SSEEvent

SAMPLE = (
    "\ufeff: OPENROUTER PROCESSING\n"
    "\n"
    'data: {"choices":[{"delta":{"content":"héllo ✓ 😀"}}]}\n'
    "\n"
    'data:{"no":"space"}\r\n'
    "\r\n"
    "event: error\r"
    'data: {"error":{"message":"m"}}\r'
    "\r"
    "id: 7\n"
    "data: line one\n"
    "data:  two spaces keep one\n"
    "data\n"
    "retry: 1000\n"
    "unknown: ignored\n"
    "\n"
    "event: lonely-without-data\n"
    "\n"
    ": trailing comment\n"
    "data: [DONE]\n"
    "\n"
).encode()

EXPECTED = [
    SSEEvent('{"choices":[{"delta":{"content":"héllo ✓ 😀"}}]}'),
    SSEEvent('{"no":"space"}'),
    SSEEvent('{"error":{"message":"m"}}', event="error"),
    SSEEvent("line one\n two spaces keep one\n"),
    SSEEvent("[DONE]"),
]


def decode(pieces: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = [e for piece in pieces for e in decoder.feed(piece)]
    return events + decoder.flush()


def test_sample_stream_decodes_to_the_expected_events() -> None:
    assert decode([SAMPLE]) == EXPECTED
    assert EXPECTED[-1].is_done and not EXPECTED[0].is_done


def test_a_split_at_every_byte_gives_the_same_events() -> None:
    for cut in range(len(SAMPLE) + 1):
        assert decode([SAMPLE[:cut], SAMPLE[cut:]]) == EXPECTED, cut


def test_byte_by_byte_gives_the_same_events() -> None:
    assert decode([SAMPLE[i : i + 1] for i in range(len(SAMPLE))]) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(SAMPLE)), max_size=30))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(SAMPLE)]
    assert decode([SAMPLE[a:b] for a, b in itertools.pairwise(bounds)]) == EXPECTED


def test_events_are_delivered_as_soon_as_their_blank_line_arrives() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: one\n") == []
    assert decoder.feed(b"\ndata: tw") == [SSEEvent("one")]
    assert decoder.feed(b"o\n\n") == [SSEEvent("two")]
    assert decoder.flush() == []


def test_a_last_event_without_its_blank_line_is_flushed_at_end_of_stream() -> None:
    assert decode([b'data: {"a":1}']) == [SSEEvent('{"a":1}')]
    assert decode([b"data: [DONE]\n"]) == [SSEEvent("[DONE]")]
    assert decode([b"data: x\r"]) == [SSEEvent("x")]


def test_a_cr_at_the_end_of_a_chunk_waits_to_see_if_lf_follows() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n") == []  # CRLF was one line end, not two
    assert decoder.feed(b"\r\n") == [SSEEvent("a")]


def test_comments_are_not_delivered() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b": OPENROUTER PROCESSING\n\n: again\n\n") == []


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert decode([b"data: \xff\xfe ok\n\n"]) == [SSEEvent("\ufffd\ufffd ok")]


def test_a_long_line_in_many_small_chunks_is_scanned_once() -> None:
    decoder = SSEDecoder()
    line = b"data: " + b"x" * 200_000
    for i in range(0, len(line), 100):
        assert decoder.feed(line[i : i + 100]) == []
    assert decoder.feed(b"\n\n") == [SSEEvent("x" * 200_000)]
