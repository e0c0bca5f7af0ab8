"""UUIDv7 ids: time-ordered, so a session file sorts the way it was written."""

from __future__ import annotations

import re

import uuid6

UUID7_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
_UUID7 = re.compile(UUID7_PATTERN)


def new_id() -> str:
    """A fresh UUIDv7 string, for ids that must be reserved before their fact exists."""
    return str(uuid6.uuid7())


def is_uuid7(value: str) -> bool:
    return _UUID7.match(value) is not None
