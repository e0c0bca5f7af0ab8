"""Canonical JSON and the digests derived from it (docs/session-format.md §3.3)."""

from __future__ import annotations

import functools
import hashlib
import json
import math
from typing import Any

from ._records import ToolIdentity

# The deepest nesting of arrays and objects a fact may hold, checked on commit and on load
# (the store never writes a line its own reader refuses); the provider's tool-call parser
# checks it first and turns an over-deep value into an error the model sees.
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


# Integers of fewer digits convert to and from text in every Python, whatever its
# int_max_str_digits (640 is the lowest limit it accepts): the JSON reader, canonical_json
# and a later kernel all agree on them. A model has no business sending longer ones.
_INT_LIMIT = 10**640


def json_value_problem(value: Any) -> str | None:
    """Why `value` is no JSON value a session may hold (docs/session-format.md §3.4), or
    None when it is one: anything else would be written changed (a tuple as an array, NaN
    as null, a lone surrogate as U+FFFD), or refused by the reader. Iterative, so no value
    can exhaust the stack, and a cycle stops at the depth limit."""
    if not isinstance(value, dict | list):
        return _scalar_problem(value)
    # perf: register row "ascii-fast-path" (docs/benchmarks.md).
    # Only containers go on the stack; scalars are checked where they are found, and an
    # ASCII string (most of what a model sends) costs two checks. This runs on every
    # tool call's commit and load.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"arrays and objects nest more than {MAX_JSON_DEPTH} levels deep"
        if isinstance(container, dict):
            children: Any = container.values()
            for key in container:
                if type(key) is not str or not key.isascii():
                    problem = _key_problem(key)
                    if problem:
                        return problem
        else:
            children = container
        for child in children:
            if type(child) is str and child.isascii():
                continue
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
                continue
            problem = _scalar_problem(child)
            if problem:
                return problem
    return None


def _key_problem(key: object) -> str | None:
    if not isinstance(key, str):
        return f"an object key is a Python {type(key).__name__}, not a string"
    return _text_problem(key)


def _scalar_problem(item: object) -> str | None:
    if isinstance(item, str):
        return _text_problem(item)
    if isinstance(item, bool) or item is None:
        return None
    if isinstance(item, int):
        if -_INT_LIMIT < item < _INT_LIMIT:
            return None
        return "an integer has more than 640 digits"
    if isinstance(item, float):
        if math.isfinite(item):
            return None
        return f"the number {item} is not JSON (NaN and infinities are not numbers)"
    return f"a Python {type(item).__name__} is not a JSON value"


def _text_problem(text: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a string holds a lone surrogate (U+{ord(exc.object[exc.start]):04X}), not text"
    return None


# perf: register row "canonical-encoder" (docs/benchmarks.md)
# One encoder, built once: `json.dumps` with these options builds a JSONEncoder per call.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


def canonical_json(value: Any) -> str:
    """Keys sorted, no whitespace, UTF-8 text, NaN/Infinity refused."""
    return _CANONICAL(value)


def sha256_digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def replay_key(tool: ToolIdentity, arguments: dict[str, Any], environment_identity: str) -> str:
    """Identity of a tool effect: the same key means the same call on the same workspace.

    The digest of `{"tool": ..., "arguments": ..., "environmentIdentity": ...}` (§3.3)."""
    # perf: register row "replay-key-tail" (docs/benchmarks.md).
    # Canonical JSON sorts those three keys as "arguments" < "environmentIdentity" <
    # "tool", so the hashed text is '{"arguments":', the arguments' canonical JSON, then a
    # tail fixed by the tool and the workspace: only the arguments are encoded per call.
    # This runs twice per tool call on commit (the intent's constructor, the reducer).
    digest = hashlib.sha256(_ARGUMENTS_HEAD)
    digest.update(_CANONICAL(arguments).encode("utf-8"))
    # perf: register row "replay-key-fields" (docs/benchmarks.md): the tail's key is the
    # tool's fields, not the model (whose hash and == are Python code, run per lookup).
    digest.update(_key_tail(tool.name, tool.version, tool.source, environment_identity))
    return "sha256:" + digest.hexdigest()


_ARGUMENTS_HEAD = b'{"arguments":'
# The tail's fields are ToolIdentity's, all of them (its `model_dump()` would be hashed).
assert tuple(ToolIdentity.model_fields) == ("name", "version", "source")


# A notebook meets few (tool, workspace) pairs; the bound only caps what a long-lived
# process keeps.
@functools.lru_cache(maxsize=256)
def _key_tail(name: str, version: str, source: str, environment_identity: str) -> bytes:
    tool = {"name": name, "version": version, "source": source}
    text = f',"environmentIdentity":{canonical_json(environment_identity)},"tool":'
    return (text + canonical_json(tool) + "}").encode("utf-8")
