"""What every model of the session file is made of (docs/session-format.md §1-§2): one strict,
frozen, closed base model, the field types a line's values take (ids, digests, counts,
times), and the limits a file's numbers are believed within."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

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
