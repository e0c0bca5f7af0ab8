"""A stdio MCP server that can be made to hang up and linger, for the start-interrupt tests.

    python tests/helpers/mcp_lingering_server.py PID_FILE

It writes its pid to PID_FILE, answers initialize and tools/list (one tool, `noop`), and
ignores SIGTERM. On SIGUSR1 it closes its stdout (the client sees the connection end at
once) and lives on: the client's shutdown then takes its whole bounded sequence (stdin
closed, SIGTERM, SIGKILL), during which the server is failed but not yet ended.
Written by hand (no SDK import): it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def _hang_up(_signum: int, _frame: object) -> None:
    os.close(1)


def main() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, _hang_up)
    Path(sys.argv[1]).write_text(str(os.getpid()), encoding="utf-8")
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue  # a notification
        result: dict[str, Any] = {}
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "lingering", "version": "1.0"},
            }
        elif method == "tools/list":
            result = {"tools": [{"name": "noop", "inputSchema": {"type": "object"}}]}
        try:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
            sys.stdout.flush()
        except OSError:  # hung up
            pass
    while True:  # stdin closed: linger until SIGKILL
        time.sleep(1)


if __name__ == "__main__":
    main()
