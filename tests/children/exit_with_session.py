"""A shell that runs one cell against the loopback server at argv[1] (in the directory
argv[2]), then exits without `%unload_ext`, as a kernel does when it is shut down.

An exit hook registered before the extension loads runs after the extension's own (atexit
runs last-registered first): it reports whether the server still holds a connection from
this process, which it would until the process is gone if nothing closed the client.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell


def open_connections(port: int) -> int:
    """ESTABLISHED TCP connections of this process to `port` (from /proc/net/tcp)."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    with Path("/proc/net/tcp").open() as table:
        for row in list(table)[1:]:
            fields = row.split()
            remote_port = int(fields[2].split(":")[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def report(port: int) -> None:
    deadline = time.monotonic() + 5
    while open_connections(port) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(f"open connections at exit: {open_connections(port)}", flush=True)


def main() -> None:
    base_url = sys.argv[1]
    port = int(base_url.rsplit(":", 1)[1].split("/")[0])
    atexit.register(report, port)
    workdir = Path(sys.argv[2])
    os.chdir(workdir)
    os.environ.update(
        IPYTHONDIR=str(workdir / ".ipython"),
        TINY_AGENT_BASE_URL=base_url,
        TINY_AGENT_MODEL="test/model",
        TINY_AGENT_API_KEY="sk-test",
        JPY_SESSION_NAME=str(workdir / "exit.ipynb"),
    )
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tiny_agent_nb")
    shell.run_cell("%%agent\nhello")
    print("answered" if open_connections(port) == 1 else "no connection", flush=True)


if __name__ == "__main__":
    main()
