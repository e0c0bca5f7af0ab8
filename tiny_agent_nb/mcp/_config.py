"""The `mcpServers` configuration other MCP clients use, read into frozen values.

    {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]},
                    "docs": {"url": "https://host/mcp", "headers": {"Authorization": "..."}}}}

The secrets of a server are its header values, the values of its env variables whose
names say they are credentials (`*KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*AUTH*`,
...: `redaction.is_secret_name`) or that its `"secretEnv"` list names, the credentials of
URLs (its `url`, and any inside an env value or an argument), and the value of a
credential flag among its arguments (`--api-key X`). They are handed to the
transport, and nothing else (repr, `describe`, error messages, the configuration digest)
shows them; `secrets()` lists them for redaction. Other values (`TZ`, a path) are not
secrets: redacting them would mangle what the model and the user read.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._exceptions import TinyAgentError
from ..redaction import (
    argument_secrets,
    is_secret_name,
    mask_credentials,
    redact_url,
    secrets_of,
    url_secrets,
)
from ..words import byte_size

__all__ = ["McpConfig", "McpConfigError", "ServerConfig", "parse_config"]


class McpConfigError(TinyAgentError, ValueError):
    """The MCP configuration cannot be used; the message names the server and the field,
    never an env or header value."""


@dataclass(frozen=True)
class ServerConfig:
    name: str  # the key under "mcpServers"
    command: str | None = None  # stdio
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = field(default=None, repr=False)  # streamable HTTP (shown redacted)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Env variables whose values are secrets though their names do not say so.
    secret_env: tuple[str, ...] = ()

    def __repr__(self) -> str:
        # The dataclass repr would show a URL's password; env and header *names* are
        # harmless and help, their values are not shown.
        return (
            f"ServerConfig(name={self.name!r}, {self.describe()!r}, env={sorted(self.env)!r}, "
            f"headers={sorted(self.headers)!r})"
        )

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "http" if self.url is not None else "stdio"

    def secrets(self) -> tuple[str, ...]:
        """The server's secrets (see the module's docstring), longest first."""
        found: set[str] = set()
        for value in self.headers.values():
            found.update(secrets_of(value, whole=True))  # "Bearer abc": abc alone too
        for name, value in self.env.items():
            secret = is_secret_name(name) or name in self.secret_env
            found.update(secrets_of(value, whole=secret))
        found.update(argument_secrets(self.args))
        if self.url is not None:
            found.update(url_secrets(self.url))
        return tuple(sorted(found, key=len, reverse=True))

    def shown_args(self) -> tuple[str, ...]:
        """The arguments as they may be shown: credentials in them as `****`."""
        return tuple(mask_credentials(self.args))

    def digest_material(self) -> dict[str, Any]:
        """What a configurationDigest may cover of this server: where it is and which env
        and header *names* it gets, no value (a digest of a secret is an oracle for it)."""
        return {
            "name": self.name,
            "transport": self.transport,
            "command": self.command,
            "args": list(self.shown_args()),
            "cwd": self.cwd,
            "url": None if self.url is None else redact_url(self.url),
            "env": sorted(self.env),
            "headers": sorted(self.headers),
        }

    def describe(self) -> str:
        """One line without a secret: `stdio: uvx mcp-server-time`, `http: https://host/mcp`."""
        if self.url is not None:
            return f"http: {redact_url(self.url)}"
        return "stdio: " + " ".join([self.command or "", *self.shown_args()])


@dataclass(frozen=True)
class McpConfig:
    servers: tuple[ServerConfig, ...] = ()  # in the file's order

    def secrets(self) -> tuple[str, ...]:
        found = {s for server in self.servers for s in server.secrets()}
        return tuple(sorted(found, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self.servers)

    def digest_material(self) -> list[dict[str, Any]]:
        return [server.digest_material() for server in self.servers]


def parse_config(value: str | Mapping[str, Any] | None) -> McpConfig:
    """`value` is the mapping `{"mcpServers": {...}}`, JSON text of it, or the path of a
    JSON file holding it (`~` expanded); None or "" is no server."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return McpConfig()
    if isinstance(value, str):
        value = _load_text(value)
    if not isinstance(value, Mapping):
        raise McpConfigError("the MCP configuration must be a JSON object with 'mcpServers'")
    servers = value.get("mcpServers")
    if servers is None:
        raise McpConfigError("the MCP configuration has no 'mcpServers' object")
    if not isinstance(servers, Mapping):
        raise McpConfigError("'mcpServers' must be an object mapping names to servers")
    parsed = []
    for name, entry in servers.items():
        if not isinstance(name, str) or not name:
            raise McpConfigError("an MCP server name must be a non-empty string")
        if not isinstance(entry, Mapping):
            raise McpConfigError(f"MCP server {name!r}: must be an object")
        if entry.get("disabled") is not True:  # other clients' switch: kept but not used
            parsed.append(_server(name, entry))
    return McpConfig(tuple(parsed))


def is_json_text(value: str) -> bool:
    """JSON text rather than a path to a file holding it."""
    return value.lstrip().startswith("{")


def _load_text(text: str) -> Any:
    what = "the MCP configuration"
    if not is_json_text(text):
        path = Path(text.strip()).expanduser()
        what = f"the MCP configuration file {str(path)!r}"
        try:
            text = read_config_file(path)
        except (OSError, UnicodeDecodeError) as exc:
            reason = (
                exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            )
            raise McpConfigError(
                f"cannot read {what}: {reason}; "
                'set it to a JSON file holding {"mcpServers": ...}, or to that JSON text'
            ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # The position only: the text itself may hold a header value.
        raise McpConfigError(
            f"{what} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except RecursionError:
        raise McpConfigError(
            f"{what} is nested too deeply to read; an mcpServers object is a few levels deep"
        ) from None


MAX_FILE_SIZE = 4 * 1024 * 1024  # a configuration is a few KB; this bounds a wrong path


def read_config_file(path: Path) -> str:
    """The file's text, if it is a regular file of at most MAX_FILE_SIZE bytes: a FIFO
    would block the kernel until something writes to it, and /dev/zero never ends."""
    # O_NONBLOCK: opening a FIFO for reading blocks until a writer opens it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = f.read(MAX_FILE_SIZE + 1)
    if len(data) > MAX_FILE_SIZE:
        raise OSError(errno.EFBIG, f"larger than {byte_size(MAX_FILE_SIZE)}")
    return data.decode("utf-8")


def _server(name: str, entry: Mapping[str, Any]) -> ServerConfig:
    def refused(what: str) -> McpConfigError:
        return McpConfigError(f"MCP server {name!r}: {what}")

    command, url = entry.get("command"), entry.get("url")
    if command is None and url is None:
        raise refused("needs 'command' (stdio) or 'url' (HTTP)")
    if command is not None and url is not None:
        raise refused("has both 'command' and 'url'; keep one")
    if command is not None:
        if not isinstance(command, str) or not command:
            raise refused("'command' must be a non-empty string")
        for key in ("url", "headers"):
            if entry.get(key):
                raise refused(f"'{key}' is for HTTP servers")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise refused("'cwd' must be a string")
        env = _string_map(name, "env", entry.get("env"))
        secret_env = _strings(name, "secretEnv", entry.get("secretEnv", []))
        unknown = [n for n in secret_env if n not in env]
        if unknown:
            raise refused(f"'secretEnv' names {unknown[0]!r}, which its 'env' does not set")
        args = _strings(name, "args", entry.get("args", []))
        return ServerConfig(name, command, args, env, cwd, secret_env=secret_env)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise refused("'url' must be an http:// or https:// URL")
    for key in ("args", "env", "cwd", "secretEnv"):
        if entry.get(key):
            raise refused(f"'{key}' is for stdio servers")
    return ServerConfig(name, url=url, headers=_string_map(name, "headers", entry.get("headers")))


def _strings(name: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise McpConfigError(f"MCP server {name!r}: '{key}' must be a list of strings")
    return tuple(value)


def _string_map(name: str, key: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise McpConfigError(f"MCP server {name!r}: '{key}' must be an object of strings")
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            # The name only: the value is a secret.
            raise McpConfigError(
                f"MCP server {name!r}: '{key}' entry {str(k)!r} must have a string value"
            )
    return dict(value)
