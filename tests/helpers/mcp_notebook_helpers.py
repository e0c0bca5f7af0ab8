"""What the MCP notebook and kernel tests share beyond tests/helpers/mcp_helpers.py: the test
server over streamable HTTP as a fixture, readers of what the model was offered and what
the session file holds, and a look for processes left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.mcp_helpers import HttpTestServer, pid_alive
from helpers.openai_server import RecordedRequest

HEADER_SECRET = "SENTINEL-HDR-9e8d7c6b5a"  # the HTTP server refuses a request without it


@pytest.fixture
def http_server() -> Iterator[str]:
    """The test server over streamable HTTP on 127.0.0.1; its URL. It answers only a
    request whose Authorization header is `Bearer HEADER_SECRET`."""
    with HttpTestServer(authorization=f"Bearer {HEADER_SECRET}") as server:
        yield server.url


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def tool_names(request: RecordedRequest) -> set[str]:
    """The tools a model request offered."""
    return {t["function"]["name"] for t in request.body.get("tools", [])}


def tool_results(request: RecordedRequest) -> dict[str, str]:
    """The tool messages a model request sent back, by tool call id."""
    return {
        m["tool_call_id"]: m["content"] for m in request.body["messages"] if m["role"] == "tool"
    }


def transactions(session: Path) -> list[list[dict[str, Any]]]:
    """The session file's lines as transactions (a lone fact is a transaction of one)."""
    out = []
    for line in session.read_text(encoding="utf-8").splitlines()[1:]:
        parsed = json.loads(line)
        out.append(parsed if isinstance(parsed, list) else [parsed])
    return out


def marker_lines(marker: Path) -> list[str]:
    """What `mark_and_sleep` wrote: '<pid> started', then 'finished' or 'cancelled'."""
    return marker.read_text(encoding="utf-8").splitlines() if marker.exists() else []


def processes_mentioning(text: str) -> list[int]:
    """The running processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if text in cmdline and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found
