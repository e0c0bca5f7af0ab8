"""Which stop a run's KeyboardInterrupt was: the user's Ctrl-C, or a kernel restart or
shutdown asked for from Jupyter's menu while the run went on.

jupyter_client ends a kernel in two steps (`KernelManager.shutdown_kernel`, which a
restart calls too): it interrupts it first (SIGINT: a KeyboardInterrupt in the running
cell, exactly as "interrupt kernel" or Ctrl-C is), then sends `shutdown_request` on the
control channel, whose thread in ipykernel answers by setting the shell's `exit_now`
(`do_shutdown`). So the interrupt comes first and says nothing of why: a run stopped by
one waits briefly for that request before it records its abort. The request follows the
signal at once (both are sent back to back) and the kernel is given seconds to act on
it before it is killed (`shutdown_wait_time`), so the wait costs a restart nothing; it
costs a Ctrl-C `SHUTDOWN_GRACE` before "■ Interrupted" is printed.
"""

from __future__ import annotations

import threading
from typing import Any

# An abort's reasons (`abortRequested.reason`) other than the user's Ctrl-C, as every
# surface says them: the cell, the timeline, `%agent status`, `tiny-agent-nb`.
STOP_BUTTON = "stopped with the Stop button"
RESTARTED = "stopped by a kernel restart"
SHUT_DOWN = "stopped by a kernel shutdown"
# Seconds a run stopped by a KeyboardInterrupt waits for a shutdown request to follow.
SHUTDOWN_GRACE = 0.5


class ShutdownWatch:
    """Follows one shell's `exit_now`; `stopped_by()` is `AgentLoop`'s question."""

    def __init__(self, shell: Any, *, grace: float = SHUTDOWN_GRACE) -> None:
        self._shell = shell
        self._grace = grace
        self._asked = threading.Event()
        self._reason = SHUT_DOWN
        # Only a kernel has a control channel to be shut down from; a terminal's
        # `exit_now` (the user typed exit) is never set while a cell runs.
        self.active = getattr(shell, "kernel", None) is not None
        if self.active:
            shell.observe(self._on_exit_now, names="exit_now")

    def close(self) -> None:
        if self.active:
            self._shell.unobserve(self._on_exit_now, names="exit_now")
            self.active = False

    def _on_exit_now(self, change: dict[str, Any]) -> None:
        """On ipykernel's control thread, inside its answer to `shutdown_request`."""
        if not change["new"]:
            return
        self._reason = RESTARTED if _restarting(self._shell) else SHUT_DOWN
        self._asked.set()

    def stopped_by(self) -> str | None:
        """After a KeyboardInterrupt: why the kernel is going away, when it is."""
        if self.active and self._asked.wait(self._grace):
            return self._reason
        return None

    @property
    def asked(self) -> bool:
        """A shutdown or restart was asked for (no wait)."""
        return self._asked.is_set()


def _restarting(shell: Any) -> bool:
    """Whether the control message being answered asks for a restart (its `restart`)."""
    try:
        request = shell.kernel.get_parent("control")
        return bool(request["content"]["restart"])
    except (AttributeError, KeyError, TypeError):
        return False


def interrupted_line(*, shutting_down: bool, stop_button: bool = False) -> str:
    """What a cell stopped by a KeyboardInterrupt says last."""
    if stop_button:  # the reason as recorded, as a sentence
        return (
            f"■ {STOP_BUTTON[0].upper()}{STOP_BUTTON[1:]}. The abort is recorded; "
            "`%agent resume` continues the run."
        )
    if shutting_down:
        return (
            "■ Stopped: the kernel is shutting down. The abort is recorded; in the next "
            "kernel, `%agent resume` continues the run."
        )
    return "■ Interrupted. The abort is recorded; `%agent resume` continues the run."
