"""The parent in tests/test_mcp_guard.py: starts a guarded command the way the MCP SDK
starts a stdio server, then waits to be killed.

    python mcp_guard_parent.py [--from-thread | --block-sigterm | --die-first] -- COMMAND [ARG...]

Starts `guard_argv(COMMAND, ARGS)` with pipes for its stdin and stdout, in a session of its
own (as mcp.client.stdio does), prints `guard PID` and blocks reading its own stdin; the
test usually SIGKILLs it.

--from-thread    the guard is started from a thread that ends when a line arrives on
                 stdin (the process lives on)
--block-sigterm  the guard is started with SIGTERM blocked, a mask it inherits: the death
                 signal never arrives, only the watch on os.getppid() is left
--die-first      the guard is forked, stops itself, and this process prints its pid and
                 exits; continued (by the kernel, which continues a stopped process
                 whose group is orphaned, or by the test), it then executes the guard,
                 whose parent died before it could ask for the death signal
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from tiny_agent_nb._guard import guard_argv


def start(command: str, args: list[str]) -> int:
    executable, argv = guard_argv(command, args)
    guard = subprocess.Popen(
        [executable, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    return guard.pid


def die_first(command: str, args: list[str]) -> None:
    executable, argv = guard_argv(command, args)  # names this process as the parent
    pid = os.fork()
    if pid == 0:
        # An orphaned group with a stopped member gets SIGHUP, then SIGCONT.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        os.kill(os.getpid(), signal.SIGSTOP)
        os.execv(executable, [executable, *argv])
    os.waitpid(pid, os.WUNTRACED)  # returns once the child has stopped
    print(f"guard {pid}", flush=True)
    os._exit(0)


def main() -> None:
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "--":
        mode, rest = "", sys.argv[1:]
    command, args = rest[1], rest[2:]
    if mode == "--die-first":
        die_first(command, args)
    if mode == "--block-sigterm":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    if mode == "--from-thread":
        started = threading.Event()

        def spawner() -> None:
            print(f"guard {start(command, args)}", flush=True)
            started.set()
            sys.stdin.readline()  # ends when the test says so (the guard runs by then)

        threading.Thread(target=spawner).start()
        started.wait()
    else:
        print(f"guard {start(command, args)}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
