"""Canonical JSON and the digests derived from it (DESIGN §2 "Canonical values")."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ._models import ToolIdentity

# The deepest nesting of arrays and objects a fact may hold (arguments the model chose
# included). One limit, checked on commit and on load, so the store never writes a line
# its own reader refuses; a producer (the provider's tool-call parser) checks it first
# and turns an over-deep value into an error the model sees.
MAX_JSON_DEPTH = 64


def json_depth(value: Any) -> int:
    """How deeply arrays and objects nest in `value` (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


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
