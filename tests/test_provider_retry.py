"""backoff_delay and Retry-After parsing: pure, so no clock and no sleeps."""

from __future__ import annotations

import pytest

from tiny_agent_nb.provider import backoff_delay
from tiny_agent_nb.provider._errors import parse_retry_after, retry_after_of

NOW = 1_445_412_480.0  # Wed, 21 Oct 2015 07:28:00 GMT


def test_backoff_doubles_per_attempt_up_to_the_cap() -> None:
    assert [backoff_delay(n, None) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff_delay(3, None, base=0.5, cap=10) == 2.0
    assert backoff_delay(10_000, None) == 30.0  # no overflow


def test_backoff_honours_retry_after_within_the_cap() -> None:
    assert backoff_delay(1, 7.0) == 7.0
    assert backoff_delay(5, 0.0) == 0.0
    assert backoff_delay(1, 3600.0) == 30.0
    assert backoff_delay(1, -5.0) == 0.0
    assert backoff_delay(2, float("nan")) == 2.0


def test_backoff_treats_attempt_zero_as_the_first() -> None:
    assert backoff_delay(0, None) == backoff_delay(1, None) == 1.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", 7.0),
        (" 1.5 ", 1.5),
        ("0", 0.0),
        ("-3", 0.0),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),
        ("Wed, 21 Oct 2015 07:28:10 -0000", 10.0),
        ("soon", None),
        ("", None),
        (None, None),
        ("inf", None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == expected


def test_retry_after_ms_is_preferred() -> None:
    assert retry_after_of({"retry-after-ms": "1500", "retry-after": "9"}, now=NOW) == 1.5
    assert retry_after_of({"retry-after": "9"}, now=NOW) == 9.0
    assert retry_after_of({}, now=NOW) is None
