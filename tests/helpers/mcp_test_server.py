"""An MCP server written with the SDK's own server API, for tests (stdio or streamable HTTP).

    python tests/helpers/mcp_test_server.py stdio
    python tests/helpers/mcp_test_server.py http [--authorization VALUE]

`http` binds 127.0.0.1 port 0 itself and prints the port on its first stdout line; with
`--authorization`, a request whose `Authorization` header is not VALUE gets 401.
With `--zygote SOCKET` (first), the server is forked by the zygote listening there
(tests/helpers/mcp_zygote.py), which imported the SDK once, and this process stands for it.
Misbehaviours for the failure tests: `--exit-at-once` (after `--say`/`--say-env` on
stderr), `--hang` (never answers, ignores SIGTERM), `--stubborn` (serves, then outlives
stdin EOF and SIGTERM: only SIGKILL ends it).
The server itself (its tools) is tests/helpers/mcp_test_tools.py. The misbehaviours that never
speak MCP are handled before it is imported: the SDK's import is most of a server
process's start-up, and the failure tests start many such servers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import NoReturn


def _sleep_forever() -> None:
    while True:
        time.sleep(1)


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--zygote"]:
        _stand_for_a_forked_server(argv[1], argv[2:])
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--authorization")
    parser.add_argument("--say", help="write this line to stderr at start")
    parser.add_argument("--say-env", help="write this env variable's value to stderr at start")
    parser.add_argument("--exit-at-once", action="store_true", help="exit 3 after --say")
    parser.add_argument("--hang", action="store_true", help="never answer (ignores stdin EOF)")
    parser.add_argument(
        "--bad-schema", action="store_true", help="also offer `odd`, whose input schema is invalid"
    )
    parser.add_argument(
        "--stubborn", action="store_true", help="serve, then outlive stdin EOF and SIGTERM"
    )
    options = parser.parse_args(argv)
    if options.say:
        print(options.say, file=sys.stderr, flush=True)
    if options.say_env:
        print(os.environ.get(options.say_env, ""), file=sys.stderr, flush=True)
    if options.exit_at_once:
        sys.exit(3)
    if options.hang or options.stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if options.hang:
        _sleep_forever()
    # The SDK starts a server with an environment of its own (no PYTHONPYCACHEPREFIX or
    # PYTHONDONTWRITEBYTECODE from the run): without this, importing the module below
    # would leave its bytecode in tests/, outside a temporary directory.
    sys.dont_write_bytecode = True
    from mcp_test_tools import add_odd_tool, serve_http, server  # noqa: PLC0415 (see above)

    if options.bad_schema:
        add_odd_tool()
    if options.transport == "stdio":
        server.run("stdio")
        if options.stubborn:
            _sleep_forever()
    else:
        serve_http(options.authorization)


def preload() -> None:
    """What a server imports, for the zygote to import once before it forks servers."""
    import anyio._backends._asyncio  # noqa: PLC0415, F401 (imported when a server runs)
    import mcp.server.stdio  # noqa: PLC0415, F401
    import mcp_test_tools  # noqa: PLC0415, F401
    import uvicorn  # noqa: PLC0415, F401


def _stand_for_a_forked_server(zygote: str, argv: list[str]) -> NoReturn:
    """Have the zygote fork the server on this process's stdio, forward the stop signals
    to it, and exit as it did (a signal's death by the same signal)."""
    from mcp_zygote import fork_server  # noqa: PLC0415 (stdlib only)

    forked = fork_server(zygote, [sys.argv[0], *argv], (0, 1, 2))
    # The server holds the pipes now; copies here would keep EOF from either side.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda signum, _frame: forked.signal(signum))
    status = forked.wait()
    if status < 0:
        print("the MCP test zygote is gone", file=sys.stderr, flush=True)
        sys.exit(1)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum != signal.SIGKILL:  # SIGKILL's action cannot be set (EINVAL): it kills
            signal.signal(signum, signal.SIG_DFL)
        with contextlib.suppress(OSError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
