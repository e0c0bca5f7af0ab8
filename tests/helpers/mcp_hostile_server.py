"""A hostile MCP server over stdio, for the tests of hostile servers: it says exactly what a script
tells it, including what the SDK's own server API would never send.

    python tests/helpers/mcp_hostile_server.py SCRIPT.json

SCRIPT (read with `json.load`, so "\\ud800" in it is a lone surrogate):
  "version": str            serverInfo.version
  "tools": [Tool, ...]      listed as they are (any name, schema, description)
  "pages_forever": "same"|"new"   every tools/list page says there is a next one,
                            at the same cursor or at a new one each time
  "results": {name: CallToolResult as JSON}   the answer to tools/call of that tool
  "before_result": [message, ...]   sent before each tools/call answer (a string is
                            written as a line as it is: no JSON-RPC at all)
It answers initialize, tools/list and tools/call; every other request gets an error.
Written by hand on purpose: a hostile server does not use a well-behaved library.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def send(message: dict[str, Any]) -> None:
    # ensure_ascii: a lone surrogate goes out as the JSON escape "\\ud800".
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        script = json.load(f)
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue  # a notification
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "hostile", "version": script.get("version", "6.6.6")},
            }
        elif method == "tools/list":
            result = {"tools": script.get("tools", [])}
            forever = script.get("pages_forever")
            if forever:
                cursor = (message.get("params") or {}).get("cursor") or ""
                result["nextCursor"] = cursor + "+" if forever == "new" else "again"
        elif method == "tools/call":
            for extra in script.get("before_result", []):
                if isinstance(extra, str):  # a line as it is: what a server's print() writes
                    sys.stdout.write(extra + "\n")
                else:
                    send(extra)
            name = message["params"]["name"]
            result = script.get("results", {}).get(name, {"content": []})
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": method}})
            continue
        send({"jsonrpc": "2.0", "id": ident, "result": result})


if __name__ == "__main__":
    main()
