"""The name the model sees for an MCP tool: `<server>__<tool>`, in what providers accept."""

from __future__ import annotations

import hashlib
import re

__all__ = ["model_tool_name"]

MAX_NAME = 64  # OpenAI's (and most providers') limit on a function name
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASH = 8  # hex digits of the full name's digest kept when a name is shortened


def model_tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>` with every character outside `[A-Za-z0-9_-]` made `_`; a name
    over 64 characters keeps a prefix and a short hash of the full name, so two long
    names that share a prefix stay distinct."""
    full = f"{server}__{tool}"
    name = _UNSAFE.sub("_", full)
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:_HASH]
        name = f"{name[: MAX_NAME - _HASH - 1]}-{digest}"
    return name
