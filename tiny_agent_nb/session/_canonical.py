"""Canonical JSON and the digests derived from it (DESIGN §2 "Canonical values")."""

from __future__ import annotations

import hashlib
import json
from typing import Any

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


def replay_key(tool: dict[str, str], arguments: dict[str, Any], environment_identity: str) -> str:
    """Identity of a tool effect: the same key means the same call on the same workspace."""
    return sha256_digest(
        {"tool": tool, "arguments": arguments, "environmentIdentity": environment_identity}
    )
