"""The value of `TinyAgent.mcp_servers` as it may be shown, and the secrets it holds.

The value is the `{"mcpServers": {...}}` JSON other MCP clients use, or a path to a file
holding it. Its secrets (header values, the env values `mcp.ServerConfig.secrets` counts,
URL credentials, credential flags' values) go to the servers only: `%config TinyAgent`,
reprs and errors show each as `****` (an env value that is no secret, `TZ`, is shown).
The JSON is read loosely on purpose: a value the parser refuses must still be shown
without its secrets, and they must still be redacted from what tools return.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..mcp import is_json_text, read_config_file
from ..redaction import (
    MASK,
    argument_secrets,
    is_secret_name,
    mask_credentials,
    redact_url,
    secrets_of,
    url_secrets,
)


def shown_value(value: str) -> str:
    """`value` as `%config TinyAgent` may show it: a path as it is (the file holds the
    secrets, not its name); JSON with every secret (header values, credential-named or
    marked env values, URL credentials, credential flags' values) replaced by
    `****`; JSON that does not parse as its size only (where its secrets are cannot be
    told)."""
    if not is_json_text(value):
        return value
    try:
        # RecursionError: JSON nested deeper than Python recurses (the parser says so).
        return json.dumps(_masked(json.loads(value), []), ensure_ascii=False)
    except (ValueError, RecursionError):
        return f"<JSON that does not parse, {len(value)} characters: not shown>"


def value_secrets(value: str) -> tuple[str, ...]:
    """The servers' secrets in `value` (JSON text, or the file a path names), for
    redacting from tool results, errors and cell lines."""
    text = value if is_json_text(value) else _file_text(value)
    if text is None:
        return ()
    found: list[str] = []
    try:
        _masked(json.loads(text), found)
    except (ValueError, RecursionError):  # not parsed: no server starts from it either
        return ()
    return tuple(s for s in dict.fromkeys(found) if s)


def _file_text(value: str) -> str | None:
    if not value.strip():
        return None
    try:
        # The parser's own read: the secrets of every file it would start servers from
        # are the ones redacted (and a FIFO or /dev/zero blocks neither).
        return read_config_file(Path(value.strip()).expanduser())
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _masked(node: Any, found: list[str]) -> Any:
    """A copy of `node` with its secrets masked (the rules of `mcp.ServerConfig.secrets`,
    read loosely); each secret is appended to `found`."""
    if isinstance(node, list):
        return [_masked(item, found) for item in node]
    if not isinstance(node, dict):
        return node
    marked = node.get("secretEnv")
    marked = {n for n in marked if isinstance(n, str)} if isinstance(marked, list) else set()
    out: dict[str, Any] = {}
    for key, item in node.items():
        if key == "headers":
            out[key] = _masked_mapping(item, found, lambda _name: True)
        elif key == "env":
            out[key] = _masked_mapping(item, found, lambda n: is_secret_name(n) or n in marked)
        elif key == "url" and isinstance(item, str):
            found.extend(url_secrets(item))
            out[key] = redact_url(item)
        elif key == "args" and isinstance(item, list) and all(isinstance(a, str) for a in item):
            found.extend(argument_secrets(item))
            out[key] = mask_credentials(item)
        else:
            out[key] = _masked(item, found)
    return out


def _masked_mapping(item: Any, found: list[str], secret: Callable[[str], bool]) -> Any:
    if isinstance(item, dict):
        shown: dict[str, Any] = {}
        for name, value in item.items():
            if not isinstance(value, str):
                shown[name] = MASK  # refused by the parser; not shown either
            elif secret(name):
                found.extend(secrets_of(value, whole=True))  # "Bearer TOKEN": TOKEN too
                shown[name] = MASK
            else:
                found.extend(secrets_of(value, whole=False))  # a URL's credentials
                shown[name] = mask_credentials([value])[0]
        return shown
    # Not a mapping (a list of "K=V", a string): the configuration parser refuses it, and
    # whatever it holds is kept out of sight whole.
    found.extend(_strings(item))
    return MASK


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        out = [node]
        # "KEY=value": the value alone may appear in a server's output too.
        if "=" in node:
            out.append(node.split("=", 1)[1])
        return out
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    if isinstance(node, dict):
        return [s for item in node.values() for s in _strings(item)]
    return []
