"""Canonical JSON and the digests derived from it (DESIGN §2 "Canonical values")."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Keys sorted, no whitespace, UTF-8 text, NaN/Infinity refused."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256_digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def replay_key(tool: dict[str, str], arguments: dict[str, Any], environment_identity: str) -> str:
    """Identity of a tool effect: the same key means the same call on the same workspace."""
    return sha256_digest(
        {"tool": tool, "arguments": arguments, "environmentIdentity": environment_identity}
    )
