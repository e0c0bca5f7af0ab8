"""Ctrl-C anywhere in McpServers.start, including between two servers' submissions: every
server this start handed to the loop is stopped (its process gone), none is left running
or recorded as started, and a server not yet reached is left as it was."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.mcp import McpServers, parse_config

from helpers.mcp_helpers import pid_alive, process_entry
from helpers.polling import wait_until

LINGERING_SERVER = Path(__file__).resolve().parent / "helpers" / "mcp_lingering_server.py"


def _entry(pid_file: Path) -> dict[str, Any]:
    return process_entry(str(LINGERING_SERVER), str(pid_file))


def _pid(pid_file: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(pid_file.read_text(encoding="utf-8"))
    return None


def test_ctrl_c_between_two_submissions_stops_the_server_already_submitted(
    sigint_raises: None, tmp_path: Path
) -> None:
    a_pid, b_pid = tmp_path / "a.pid", tmp_path / "b.pid"
    servers = McpServers(parse_config({"mcpServers": {"a": _entry(a_pid), "b": _entry(b_pid)}}))
    try:
        assert servers.start() == []
        first_a, lingering_b = _pid(a_pid), _pid(b_pid)
        assert first_a is not None and lingering_b is not None
        # a dies outright; b hangs up and lingers, so its shutdown takes the SDK's whole
        # bounded sequence: the next start waits for b to end after it submitted a, and
        # that wait is the window between two submissions the SIGINT lands in.
        os.kill(first_a, signal.SIGKILL)
        os.kill(lingering_b, signal.SIGUSR1)
        wait_until(
            lambda: [s.state for s in servers.status()] == ["failed", "failed"],
            what="both servers seen gone",
        )

        def interrupt_once_a_runs_again() -> None:
            wait_until(lambda: _pid(a_pid) not in (None, first_a), 30, what="a started again")
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt_once_a_runs_again, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            servers.start()
        second_a = _pid(a_pid)
        assert second_a is not None and second_a != first_a
        states = {s.name: s.state for s in servers.status()}
        # b was never reached (its process is the lingering one): the interrupt did land
        # between the submissions.
        assert _pid(b_pid) == lingering_b and states["b"] == "failed"
        assert states["a"] == "stopped", [(s.name, s.state, s.detail) for s in servers.status()]
        assert servers.tools() == []
        wait_until(lambda: not pid_alive(second_a), 15, what="a's process to end")
    finally:
        servers.close()
        for pid in (_pid(a_pid), _pid(b_pid)):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
