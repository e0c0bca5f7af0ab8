"""The guard in front of every stdio MCP server (tiny_agent_nb/_guard.py): the server,
and everything it started, dies with the process that started it, however that dies.

Real processes throughout: a parent (tests/children/mcp_guard_parent.py) starts the guard as
the MCP SDK does, the server stand-in (tests/children/mcp_guard_server.py) starts a child of
its own, and the test SIGKILLs the parent. The test process is not the parent of what it
watches, so a process counts as gone when /proc no longer lists it or lists it as a zombie
(its reaper is not us).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiny_agent_nb._guard import ADOPTS, CANNOT_START, GRACE_S, guard_argv

from helpers.polling import wait_until

CHILDREN = Path(__file__).parent / "children"
PARENT = CHILDREN / "mcp_guard_parent.py"
SERVER = CHILDREN / "mcp_guard_server.py"
GONE_WITHIN_S = 10.0

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.fixture
def pids() -> Iterator[list[int]]:
    """Every process a test started or learnt of; SIGKILLed at the end if one is left."""
    started: list[int] = []
    yield started
    for pid in started:
        if running(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def server_command(pidfile: Path, *flags: str) -> list[str]:
    return [sys.executable, str(SERVER), str(pidfile), *flags]


def start_parent(pids: list[int], *args: str) -> tuple[subprocess.Popen[str], int]:
    """The parent, and the guard it started."""
    parent = subprocess.Popen(
        [sys.executable, str(PARENT), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids.append(parent.pid)
    assert parent.stdout is not None
    word, guard = parent.stdout.readline().split()
    assert word == "guard"
    pids.append(int(guard))
    return parent, int(guard)


def start_guarded(command: list[str]) -> subprocess.Popen[bytes]:
    """A guard started by this process, as the SDK starts a server (pipes, own session)."""
    executable, argv = guard_argv(command[0], command[1:])
    return subprocess.Popen(
        [executable, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def server_pids(pidfile: Path, pids: list[int]) -> list[int]:
    """The server's pid and its child's, once the server has written them."""
    wait_until(pidfile.exists, timeout=GONE_WITHIN_S, what="the server wrote its pids")
    found = [int(word) for word in pidfile.read_text().split()]
    pids.extend(found)
    return found


def wait_gone(*watched: int, timeout: float = GONE_WITHIN_S) -> None:
    wait_until(
        lambda: not any(running(pid) for pid in watched),
        timeout=timeout,
        what=f"{[pid for pid in watched if running(pid)]} still running",
    )


def test_a_sigkilled_parent_takes_the_guard_the_server_and_its_child_along(
    tmp_path: Path, pids: list[int]
) -> None:
    pidfile = tmp_path / "pids"
    parent, guard = start_parent(pids, "--", *server_command(pidfile))
    server, child = server_pids(pidfile, pids)
    assert running(guard) and running(server) and running(child)
    parent.kill()
    parent.wait()
    wait_gone(guard, server, child)


def setsid_server(pidfile: Path, then: str) -> list[str]:
    """A server whose child leaves its process group (`setsid`: a session of its own, as a
    daemon does), then `then` (`exec sleep 300`, `exit 0`)."""
    partial = f"'{pidfile}.partial'"
    script = f"setsid sleep 300 & echo $$ $! > {partial}; mv {partial} '{pidfile}'; {then}"
    return ["sh", "-c", script]


@pytest.mark.skipif(not ADOPTS, reason="a subreaper and /proc: Linux")
def test_a_sigkilled_parent_takes_a_setsid_grandchild_of_the_server_along(
    tmp_path: Path, pids: list[int]
) -> None:
    pidfile = tmp_path / "pids"
    parent, guard = start_parent(pids, "--", *setsid_server(pidfile, "exec sleep 300"))
    server, grandchild = server_pids(pidfile, pids)
    wait_until(lambda: os.getsid(grandchild) == grandchild, what="the grandchild's setsid")
    parent.kill()
    parent.wait()
    wait_gone(guard, server, grandchild)


@pytest.mark.skipif(not ADOPTS, reason="a subreaper and /proc: Linux")
def test_a_server_that_exits_leaves_no_setsid_grandchild_behind(
    tmp_path: Path, pids: list[int]
) -> None:
    pidfile = tmp_path / "pids"
    guard = start_guarded(setsid_server(pidfile, "exit 0"))
    pids.append(guard.pid)
    _server, grandchild = server_pids(pidfile, pids)
    assert guard.wait(timeout=GONE_WITHIN_S) == 0
    wait_gone(grandchild)


def test_the_death_signal_is_asked_for_and_comes_from_the_thread_that_started_the_guard(
    tmp_path: Path, pids: list[int]
) -> None:
    # The process lives on and getppid() does not change: only PR_SET_PDEATHSIG, whose
    # "parent" is the starting thread, stops the guard here. This is why the MCP package
    # must start servers from a thread that lives as long as they do. The thread ends
    # once the server runs: one that ended before the guard asked for the signal would
    # go unnoticed (getppid() names the process, which lives).
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    pidfile = tmp_path / "pids"
    parent, guard = start_parent(pids, "--from-thread", "--", *server_command(pidfile))
    server, child = server_pids(pidfile, pids)  # the guard has asked by the time it started it
    assert parent.stdin is not None
    parent.stdin.write("end the thread\n")
    parent.stdin.flush()
    wait_gone(guard, server, child)
    assert parent.poll() is None
    parent.kill()
    parent.wait()


def test_a_parent_death_is_seen_by_the_watch_when_the_death_signal_cannot_arrive(
    tmp_path: Path, pids: list[int]
) -> None:
    # SIGTERM blocked in the guard (inherited from its parent, as on systems without
    # PR_SET_PDEATHSIG nothing arrives at all): the getppid() watch stops the server, which
    # inherited the mask too and so is SIGKILLed after the grace.
    pidfile = tmp_path / "pids"
    parent, guard = start_parent(pids, "--block-sigterm", "--", *server_command(pidfile))
    server, child = server_pids(pidfile, pids)
    blocked = int(
        next(
            line.split()[1]
            for line in Path(f"/proc/{guard}/status").read_text().splitlines()
            if line.startswith("SigBlk:")
        ),
        16,
    )
    assert blocked & (1 << (signal.SIGTERM - 1)), "the guard was meant to block SIGTERM"
    parent.kill()
    parent.wait()
    wait_gone(guard, server, child)


def test_a_parent_that_died_before_the_guard_asked_for_the_death_signal_starts_nothing(
    tmp_path: Path, pids: list[int]
) -> None:
    marker = tmp_path / "started"
    parent, guard = start_parent(
        pids, "--die-first", "--", "sh", "-c", f"echo started > '{marker}'; sleep 300"
    )
    parent.wait()  # died before the guard ran a line of its own
    with contextlib.suppress(ProcessLookupError):  # unless the kernel continued it already
        os.kill(guard, signal.SIGCONT)
    wait_gone(guard)
    assert not marker.exists()
    assert parent.stderr is not None
    assert parent.stderr.read().strip() == "not starting sh: the process that asked for it is gone"


def test_stdin_and_stdout_pass_through_and_eof_ends_the_server() -> None:
    guard = start_guarded(["cat"])
    assert guard.stdin is not None and guard.stdout is not None
    for line in (b'{"jsonrpc": "2.0", "id": 1}\n', "é\n".encode()):
        guard.stdin.write(line)
        guard.stdin.flush()
        assert guard.stdout.readline() == line
    guard.stdin.close()  # EOF: cat ends, and so does the guard
    assert guard.wait(timeout=GONE_WITHIN_S) == 0
    assert guard.stdout.read() == b""


@pytest.mark.parametrize(
    ("script", "status"),
    [("exit 7", 7), ("kill -KILL $$", 128 + signal.SIGKILL)],
    ids=["exit 7", "killed by SIGKILL"],
)
def test_the_server_exit_status_is_the_guards(script: str, status: int) -> None:
    guard = start_guarded(["sh", "-c", script])
    assert guard.wait(timeout=GONE_WITHIN_S) == status


def test_a_server_that_exits_leaves_nothing_of_its_group_behind(
    tmp_path: Path, pids: list[int]
) -> None:
    pidfile = tmp_path / "pids"
    script = f"sleep 300 & echo $$ $! > '{pidfile}.partial'; mv '{pidfile}.partial' '{pidfile}'"
    guard = start_guarded(["sh", "-c", script])
    pids.append(guard.pid)
    _server, child = server_pids(pidfile, pids)
    assert guard.wait(timeout=GONE_WITHIN_S) == 0
    wait_gone(child)


def test_a_server_that_closes_its_pipes_is_seen_closing_them() -> None:
    # Had the guard kept its copies of stdin and stdout, the client would see neither.
    guard = start_guarded(["sh", "-c", "exec <&- >&-; sleep 300"])
    assert guard.stdin is not None and guard.stdout is not None
    try:
        readable, _, _ = select.select([guard.stdout], [], [], GONE_WITHIN_S)
        assert readable, "no EOF on the server's stdout"
        assert guard.stdout.read() == b""

        def write_refused() -> bool:
            assert guard.stdin is not None
            try:
                guard.stdin.write(b"{}\n")
                guard.stdin.flush()
            except BrokenPipeError:
                return True
            return False

        wait_until(write_refused, timeout=GONE_WITHIN_S, what="a write to the closed stdin fails")
    finally:
        guard.send_signal(signal.SIGTERM)
        guard.wait(timeout=GONE_WITHIN_S)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=str)
def test_a_stop_signal_to_the_guard_stops_the_server_and_its_child(
    tmp_path: Path, pids: list[int], sig: signal.Signals
) -> None:
    pidfile = tmp_path / "pids"
    guard = start_guarded(server_command(pidfile))
    pids.append(guard.pid)
    server, child = server_pids(pidfile, pids)
    guard.send_signal(sig)
    assert guard.wait(timeout=GONE_WITHIN_S) == 128 + signal.SIGTERM  # the server's death
    wait_gone(server, child)


def test_a_server_that_ignores_sigterm_is_sigkilled_after_the_grace(
    tmp_path: Path, pids: list[int]
) -> None:
    pidfile = tmp_path / "pids"
    guard = start_guarded(server_command(pidfile, "--ignore-sigterm"))
    pids.append(guard.pid)
    server, child = server_pids(pidfile, pids)
    sent = time.monotonic()
    guard.send_signal(signal.SIGTERM)
    assert guard.wait(timeout=GONE_WITHIN_S) == 128 + signal.SIGKILL
    assert time.monotonic() - sent >= GRACE_S  # the server had its grace
    wait_gone(server, child)


def test_a_missing_command_exits_127_with_a_readable_line() -> None:
    guard = start_guarded(["no-such-mcp-server", "--token", "not-shown"])
    _out, err = guard.communicate(timeout=GONE_WITHIN_S)
    assert guard.returncode == CANNOT_START
    assert err.decode().splitlines() == [
        "cannot start no-such-mcp-server: No such file or directory"
    ]


def imported_modules(*argv: str) -> set[str]:
    """The modules a Python process imports, from its `-X importtime` report on stderr."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=GONE_WITHIN_S,
        check=True,
    )
    rows = [line.split("|") for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {row[2].strip() for row in rows if len(row) == 3} - {"imported package"}


def test_the_guard_imports_only_the_standard_library_it_uses() -> None:
    """It sits in front of every server start, so its start is counted in what it imports
    (bench/bench_mcp_guard.py times it: about 2.4x the bare interpreter's CPU time, 4.8x
    with `site`): nothing of `site` (the environment's .pth files), of subprocess (a third
    of its start when it used Popen) or of the package, a few dozen standard modules."""
    executable, argv = guard_argv("true", [])
    assert executable == sys.executable and argv[:2] == ["-I", "-S"]
    guard = imported_modules(*argv)
    interpreter = imported_modules("-I", "-S", "-c", "pass")  # what no Python start avoids
    assert "select" in guard  # the report is read: the guard's own imports are in it
    assert not guard & {"site", "subprocess", "asyncio"}, sorted(guard)
    assert {name.split(".")[0] for name in guard} <= set(sys.stdlib_module_names), sorted(guard)
    added = guard - interpreter
    print(f"the guard imports {len(added)} modules beyond the interpreter's {len(interpreter)}")
    assert len(added) <= 35, sorted(added)


# ------------------------------------------------------------- with the MCP SDK's transport


@pytest.fixture
def sdk_client() -> Path:
    """The SDK's stdio client in a process of its own, which starts its server under the
    guard (tests/children/mcp_guard_client.py)."""
    return CHILDREN / "mcp_guard_client.py"


def test_a_sigkilled_sdk_client_leaves_no_server_behind(
    sdk_client: Path, tmp_path: Path, pids: list[int]
) -> None:
    # The SDK starts the guard (in a session of its own, with its filtered environment);
    # the server ignores its stdin, so nothing but the guard can end it.
    pidfile = tmp_path / "pids"
    client = subprocess.Popen(
        [sys.executable, str(sdk_client), "--hold", "--", *server_command(pidfile)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pids.append(client.pid)
    assert client.stdout is not None
    assert client.stdout.readline() == "started\n"
    server, child = server_pids(pidfile, pids)
    guard = int(Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[1])
    pids.append(guard)
    guard_args = Path(f"/proc/{guard}/cmdline").read_bytes().split(b"\0")
    assert any(arg.endswith(b"_guard.py") for arg in guard_args), guard_args
    client.kill()
    client.wait()
    wait_gone(guard, server, child)


def test_the_reference_server_runs_under_the_guard_and_stops_on_eof(
    sdk_client: Path, tmp_path: Path
) -> None:
    # mcp-server-time through the guard: the protocol passes, and when the SDK closes the
    # server's stdin the server exits by itself (status 0, written by the shell it runs
    # under), not by the signals the SDK and the guard send after their grace.
    status = tmp_path / "status"
    client = subprocess.run(
        [sys.executable, str(sdk_client), "--session", str(status)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert client.stdout.splitlines() == ["tools convert_time get_current_time", "closed"]
    assert status.read_text() == "0\n"
