"""Canonical JSON and the digests derived from it (DESIGN §2 "Canonical values")."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ._models import ToolIdentity

# json.dumps builds a new encoder whenever an option differs from the defaults; every
# toolStarted is checked against its replayKey on commit and on load, so build it once.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    """Keys sorted, no whitespace, UTF-8 text, NaN/Infinity refused."""
    return _CANONICAL.encode(value)


def sha256_digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


# ToolIdentity's fields are all strings, so this is its model_dump() at a fraction of the
# cost (every toolStarted is checked against its key on commit and on load).
_TOOL_FIELDS = tuple(ToolIdentity.model_fields)


def replay_key(tool: ToolIdentity, arguments: dict[str, Any], environment_identity: str) -> str:
    """Identity of a tool effect: the same key means the same call on the same workspace."""
    identity = {name: getattr(tool, name) for name in _TOOL_FIELDS}
    return sha256_digest(
        {"tool": identity, "arguments": arguments, "environmentIdentity": environment_identity}
    )
