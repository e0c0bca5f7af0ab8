"""Widget clicks answered while a `%%agent` cell runs.

ipykernel's main thread both runs the cell and reads the frontend's messages, so a
button's click (a `comm_msg`) would wait until the cell ends. Two routes answer it during
the run, whichever the kernel offers:

- **The controls' subshell** (ipykernel 7.4+): the kernel makes one subshell for the run's
  controls and every control's comm has its messages handled there, whatever shell the
  frontend addressed (JupyterLab sends a click to the busy main shell until its own comm
  subshell exists; ipykernel 7.4 replies on the shell that last published on the comm,
  the main shell for a widget a cell made). A click is then taken at any moment.
- **The pump** (ipykernel 6, and 7 before 7.4): at each event of a run and while the cell
  waits for an answer, `pump()` reads what the frontend sent to the main shell, as
  jupyter-ui-poll does: comm messages are handled at once; any other message (a cell
  queued below) goes to the kernel's own handler, queued behind this cell, in order. The
  shell's stream stays the only reader of its socket, so no message is stranded.

Neither changes how an interrupt reaches the main thread: SIGINT still raises
KeyboardInterrupt there wherever it waits.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

COMM_MESSAGES = frozenset({"comm_open", "comm_msg", "comm_close"})
POLLIN = 1  # zmq.POLLIN, without importing zmq where there is no kernel
# Set while work `later_in_this_cell` scheduled runs: it has no execute request of its own.
_WITHOUT_REPLY: ContextVar[bool] = ContextVar("without_reply", default=False)


class CommPump:
    """The kernel's main-shell stream, read for comm messages while a cell runs."""

    def __init__(self, kernel: Any, stream: Any) -> None:
        self._kernel = kernel
        self._stream = stream
        self._busy = False  # a handler that pumps again (a nested wait) must not re-enter

    @classmethod
    def of(cls, shell: Any) -> CommPump | None:
        """The pump of `shell`'s kernel; None outside an ipykernel (a terminal)."""
        kernel = getattr(shell, "kernel", None)
        if kernel is None or not hasattr(kernel, "shell_handlers"):
            return None
        try:
            # ipykernel 7: the main shell reads from the shell channel thread's socket pair.
            from ipykernel.eventloops import get_shell_stream  # noqa: PLC0415

            stream = get_shell_stream(kernel)
        except ImportError:  # ipykernel 6: the main shell reads the shell socket itself
            stream = getattr(kernel, "shell_stream", None)
        except Exception:
            log.debug("no shell stream to pump", exc_info=True)
            return None
        if stream is None or not hasattr(stream, "_recv_callback"):
            return None
        return cls(kernel, stream)

    def pump(self) -> None:
        """Handle the comm messages the frontend has sent to the main shell so far.
        Only on the main thread, which owns the stream; elsewhere it does nothing."""
        if self._busy or threading.current_thread() is not threading.main_thread():
            return
        stream = self._stream
        original: Callable[..., Any] | None = stream._recv_callback
        copy: bool = stream._recv_copy
        if original is None or stream.closed():
            return
        self._busy = True
        # An interrupt (Ctrl-C, or the Stop button's, sent from a handler run here) waits
        # until the stream is itself again: raised inside `flush`, it would leave the
        # stream reading through this pump's callback.
        try:
            with interrupt_held():
                stream.on_recv(lambda frames: self._on_message(frames, original, copy), copy=copy)
                try:
                    stream.flush(POLLIN)
                finally:
                    stream.on_recv(original, copy=copy)
        finally:
            self._busy = False

    def _on_message(self, frames: list[Any], original: Callable[..., Any], copy: bool) -> Any:
        session = self._kernel.session
        try:
            idents, rest = session.feed_identities(frames, copy=copy)
            # A peek (content=False) does not spend the message's signature: the kernel
            # refuses a signature it has seen ("Duplicate Signature") and would drop a
            # cell queued below this one if this read had taken it.
            msg_type = session.deserialize(rest, content=False, copy=copy)["msg_type"]
        except Exception:
            return original(frames)  # the kernel's own handler says what is wrong with it
        if msg_type not in COMM_MESSAGES:
            # What the kernel would have done with it: queued behind this cell, in order.
            return original(frames)
        handler = self._kernel.shell_handlers.get(msg_type)
        try:
            msg = session.deserialize(rest, content=True, copy=copy)
            if handler is not None:
                handler(self._stream, idents, msg)
        except Exception:
            log.exception("a comm message failed while the cell waited")
        return None


@contextmanager
def interrupt_held() -> Iterator[list[FrameType | None]]:
    """On the main thread, SIGINT is held back inside the block and raised (as the
    handler installed before it would have: KeyboardInterrupt in a cell) at its end, so
    an interrupt never lands halfway through what the block puts on screen. The block is
    given the list of the interrupts held so far (always empty elsewhere)."""
    held: list[FrameType | None] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, frame: held.append(frame))
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


def handle_on_controls_subshell(comms: list[Any]) -> None:
    """Have these comms' messages (a control's) handled on the controls' subshell,
    whatever shell the frontend sent them to; where there is none, on the one the
    frontend chose (ipykernel 7.4 otherwise sends them to the shell that last published
    on the comm: the busy main shell, for a widget made in a cell). Should a client
    delete the subshell meanwhile, they go to the frontend's choice again (the pump
    reads the main shell), never to a subshell that is gone."""
    kernel = getattr(comms[0], "kernel", None) if comms else None
    subshell = controls_subshell(kernel)

    def route(data: Any, default: str | None) -> str | None:
        return subshell if subshell is not None and _exists(kernel, subshell) else default

    for comm in comms:
        if hasattr(comm, "_reply_subshell_for"):
            comm._reply_subshell_for = route


# Each kernel's controls' subshell: being made, made, or not made (its making failed or
# outlived SUBSHELL_START_TIMEOUT: not tried again). Per kernel object, not per
# id(kernel): a later kernel object may reuse a dead one's id.
_CONTROLS_SUBSHELLS: weakref.WeakKeyDictionary[Any, futures.Future[str]] = (
    weakref.WeakKeyDictionary()
)
_SUBSHELL_LOCK = threading.Lock()
SUBSHELL_START_TIMEOUT = 10.0  # s; the shell channel thread only starts a thread


def controls_subshell(kernel: Any) -> str | None:
    """The subshell this kernel handles the run's controls on, made at its first use and
    kept for the kernel's life (one idle thread), made again if a client deleted it.
    None where the kernel has no subshells, or no way for a comm to choose one
    (ipykernel before 7.4), or it could not make one: the pump's route."""
    if kernel is None or not getattr(kernel, "_supports_kernel_subshells", False):
        return None
    try:
        from ipykernel.comm.comm import BaseComm  # noqa: PLC0415
    except ImportError:
        return None
    if not hasattr(BaseComm, "_reply_subshell_for"):
        return None
    with _SUBSHELL_LOCK:
        making = _CONTROLS_SUBSHELLS.get(kernel)
        if making is not None:
            made = _made(making)
            if made is None:  # still being made after its timeout, or failed once
                return None
            if _exists(kernel, made):
                return made
        making = futures.Future()
        _CONTROLS_SUBSHELLS[kernel] = making
        _make_subshell(kernel, making)
        return _made(making)


def _made(making: futures.Future[str]) -> str | None:
    return making.result() if making.done() and making.exception() is None else None


def _exists(kernel: Any, subshell: str) -> bool:
    try:
        return subshell in kernel.shell_channel_thread.manager.list_subshell()
    except Exception:
        return False


def _make_subshell(kernel: Any, making: futures.Future[str]) -> None:
    """A new subshell, made where the kernel makes the ones a frontend asks for (on its
    shell channel thread, which owns the subshells' sockets), into `making`. One made
    after the wait gave up is still kept there, for the next control."""
    try:
        thread = kernel.shell_channel_thread
        manager = thread.manager
        create = manager._create_subshell
    except AttributeError as exc:
        log.debug("this kernel makes no subshells here", exc_info=True)
        making.set_exception(exc)
        return

    def make() -> None:
        try:
            making.set_result(create())
        except Exception as exc:
            log.debug("could not make a subshell for the run's controls", exc_info=True)
            making.set_exception(exc)

    thread.io_loop.add_callback(make)
    # Held: an interrupt here would leave a subshell made for nobody.
    with interrupt_held():
        futures.wait([making], SUBSHELL_START_TIMEOUT)


def wait_for(event: threading.Event, pump: CommPump | None) -> None:
    """Wait until `event` is set, handling comm messages meanwhile (every 50 ms).
    KeyboardInterrupt (Ctrl-C, the notebook's interrupt) ends the wait, as it ends any."""
    while not event.wait(0.05 if pump is not None else None):
        if pump is not None:
            pump.pump()


def later_in_this_cell(shell: Any) -> Callable[[Callable[[], None]], None] | None:
    """A way to run something on the main thread once it is free (after the cell running
    now, and any cell already queued before it is asked), as if it were this cell: its
    output goes below this cell's, an interrupt raises KeyboardInterrupt in it, and the
    kernel says it is busy meanwhile. It has no execute_reply, though (`has_reply`), and
    what it leaves in IPython's payload (a `set_next_input`) is dropped when it ends.
    None outside an ipykernel."""
    kernel = getattr(shell, "kernel", None)
    loop = getattr(kernel, "io_loop", None)
    if kernel is None or loop is None:
        return None
    try:
        cell = (kernel._parent_ident["shell"], kernel.get_parent("shell"))
    except Exception:
        return None

    def schedule(work: Callable[[], None]) -> None:
        loop.add_callback(lambda: _as_cell(kernel, cell, work))

    return schedule


def _as_cell(kernel: Any, cell: tuple[Any, Any], work: Callable[[], None]) -> None:
    saved = (kernel._parent_ident["shell"], kernel.get_parent("shell"))
    kernel.set_parent(*cell, channel="shell")
    # What ipykernel does around a cell (pre_handler_hook): between cells it ignores SIGINT.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    _status(kernel, "busy", cell[1])
    without_reply = _WITHOUT_REPLY.set(True)
    try:
        work()
    except KeyboardInterrupt:
        log.info("work scheduled on the main shell was interrupted")
    except Exception:
        log.exception("work scheduled on the main shell failed")
    finally:
        _WITHOUT_REPLY.reset(without_reply)
        # The kernel reads the payload into the next execute_reply: left here, a cell
        # proposed (or code's `set_next_input`) would land below the next, unrelated
        # cell, and the next agent cell's own proposal would be refused as a second one.
        payloads = getattr(getattr(kernel, "shell", None), "payload_manager", None)
        if payloads is not None:
            payloads.clear_payload()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        signal.signal(signal.SIGINT, previous)
        _status(kernel, "idle", cell[1])
        kernel.set_parent(*saved, channel="shell")


def has_reply() -> bool:
    """Whether what runs now will have an execute_reply of its own to carry a payload:
    a cell does; work `later_in_this_cell` scheduled (a Resume button's run) does not."""
    return not _WITHOUT_REPLY.get()


def _status(kernel: Any, state: str, parent: Any) -> None:
    try:
        kernel._publish_status(state, "shell", parent)
    except Exception:
        log.debug("could not say the kernel is %s", state, exc_info=True)
