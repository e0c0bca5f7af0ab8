"""A stdio MCP server stand-in for tests/test_mcp_guard.py: it starts a child of its own and
lives until it is killed.

    python mcp_guard_server.py PIDFILE [--ignore-sigterm]

Starts `sleep 300` (in the server's process group, as `npx` starts node), writes
`SERVER_PID CHILD_PID` to PIDFILE (written beside it, then renamed: the test never reads
half a line) and sleeps. It does not read stdin, so only a signal ends it.
--ignore-sigterm: ignores SIGTERM, and so does the child (an ignored signal is inherited).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    pidfile = Path(sys.argv[1])
    if "--ignore-sigterm" in sys.argv[2:]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    partial = pidfile.with_name(pidfile.name + ".partial")
    partial.write_text(f"{os.getpid()} {child.pid}\n")
    partial.rename(pidfile)
    time.sleep(300)


if __name__ == "__main__":
    main()
