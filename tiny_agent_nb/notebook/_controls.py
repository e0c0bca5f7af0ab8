"""A run's controls in a Jupyter frontend: Stop and Resume (ipywidgets), and the approval
question (_keyed_buttons.py).

Each control is two outputs: a *record* (HTML and text: what the notebook keeps) and the
widget. A widget lives only as long as its kernel (reopened, it shows "Error displaying
widget: model not found"), so every control ends as its record (answered, its run ended,
or, for Resume, a later run started or it was clicked) and its widget output is emptied.
Should the kernel die first, the stylesheet (CSS `:has`) hides the dead widget and shows
the record. A `<style>` applies to the whole page, so only a cell's first control (its
Stop button, or a Resume button that may stand alone) carries it.
"""

from __future__ import annotations

import contextlib
import html
import logging
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any, cast

from ..render import cell_text
from ..words import short_arguments
from ._approval import SHOWABLE, Choice, approval_text, change_text, deny_unshowable
from ._comm_pump import (
    CommPump,
    handle_on_controls_subshell,
    interrupt_held,
    wait_for,
)
from ._timeline_view import Publish, ipython_publish

log = logging.getLogger(__name__)

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TICK = 0.1  # s between two pumps while the run streams (Stop without a comm subshell)
# s: at most this long for a Stop press's interrupt, sent from another thread, to reach
# the main thread (it takes microseconds; the bound is for a handler that kept it)
OWED_INTERRUPT_WAIT = 1.0

# A live widget hides its record; a dead one (no model: reopened; disconnected: its
# kernel died or restarted) or an emptied one is hidden, and the record shows. A spent
# control (a Stop button whose run ended) leaves nothing to read.
LIVE = ".tan-control:not(.jupyter-widgets-disconnected)"
STYLE = (
    "<style>"
    f".jp-OutputArea-child:has(.tan-control-record):has(+ .jp-OutputArea-child {LIVE})"
    "{display:none}"
    f".jp-OutputArea-child:has(.tan-control-record)+.jp-OutputArea-child:not(:has({LIVE}))"
    "{display:none}"
    ".jp-OutputArea-child:has(.tan-control-spent){display:none}"
    ".tan-control-record code{white-space:pre-wrap}"
    ".tan-control pre{max-height:24em;overflow:auto;white-space:pre-wrap;margin:2px 0}"
    "</style>"
)


@dataclass(frozen=True)
class Record:
    """What the notebook keeps of a control: one line, as text and as HTML."""

    text: str
    html: str

    @classmethod
    def of(cls, words: str, **values: str) -> Record:
        """Our `words`, their `code spans` as HTML's; the `{values}` are put in after
        the spans are marked, so a value's backticks stay text."""
        marked = re.sub("`([^`]+)`", r"<code>\1</code>", html.escape(words))
        escaped = {name: html.escape(value) for name, value in values.items()}
        return cls(words.format(**values), marked.format(**escaped))

    def bundle(self, state: str, style: str) -> dict[str, str]:
        return {
            "text/plain": self.text,
            "text/html": f'{style}<div class="tan-control-record tex2jax_ignore" '
            f'data-state="{state}">{self.html}</div>',
        }


def spent(style: str) -> dict[str, str]:
    return {"text/plain": "", "text/html": f'{style}<div class="tan-control-spent"></div>'}


def controls_available(shell: Any) -> bool:
    """Buttons only where a person answers: a Jupyter frontend that accepts `input()`
    (nbclient and papermill run cells with stdin off: nobody would click), and
    ipywidgets importable in the kernel."""
    kernel = getattr(shell, "kernel", None)
    if type(shell).__name__ != "ZMQInteractiveShell" or kernel is None:
        return False
    try:
        if not kernel.get_parent("shell").get("content", {}).get("allow_stdin"):
            return False
        import ipywidgets  # noqa: F401, PLC0415
    except Exception:  # no parent message, or no ipywidgets
        return False
    return True


class Control:
    """One control on screen: its record output and its widget output. `styled`: its
    record output carries the stylesheet (the first control of a cell does). A widget
    that is no ipywidgets box (an anywidget) is shown in one: JupyterLab marks a box's
    view disconnected when its kernel dies, which the stylesheet reads, and not an
    anywidget's own (a dead question would hide its record)."""

    def __init__(
        self, widget: Any, waiting: Record, publish: Publish, *, styled: bool = True
    ) -> None:
        import ipywidgets  # noqa: PLC0415

        if not isinstance(widget, ipywidgets.Box):
            widget = ipywidgets.VBox([widget])
        self._publish = publish
        self._style = STYLE if styled else ""
        self._record_id = f"tan-control-{uuid.uuid4().hex}"
        self._widget_id = f"tan-control-{uuid.uuid4().hex}"
        self.widget = widget
        self.settled = False
        widget.add_class("tan-control")
        comms = (getattr(model, "comm", None) for model in _models(widget))
        # Clicks taken at once, wherever the frontend sends them.
        handle_on_controls_subshell([comm for comm in comms if comm is not None])
        publish(waiting.bundle("waiting", self._style), display_id=self._record_id, update=False)
        # The view as the widget draws it, with no text of its own: the record is the text.
        view = widget._repr_mimebundle_()[WIDGET_VIEW]
        publish({WIDGET_VIEW: view, "text/plain": ""}, display_id=self._widget_id, update=False)

    def update(self, record: Record) -> None:  # a timeline's, while its widget lives
        if not self.settled:
            bundle = record.bundle("waiting", self._style)
            self._publish(bundle, display_id=self._record_id, update=True)

    def settle(self, record: Record | None) -> None:
        """Replace the control by its record (None: by nothing), and let the widget go."""
        if self.settled:
            return
        self.settled = True
        style = self._style
        bundle = record.bundle("settled", style) if record is not None else spent(style)
        self._publish(bundle, display_id=self._record_id, update=True)
        self._publish(spent(""), display_id=self._widget_id, update=True)
        try:
            for model in _models(self.widget):
                model.close()
        except Exception:
            log.debug("closing a control's widgets failed", exc_info=True)


def _models(widget: Any) -> list[Any]:
    """The widget, its children and their layout and style models, innermost first."""
    found = [model for child in getattr(widget, "children", ()) for model in _models(child)]
    parts = (getattr(widget, name, None) for name in ("layout", "style"))
    return [*found, *(part for part in parts if part is not None), widget]


class RunControls:
    """The controls of one run (a `%%agent` cell or a resume): Stop while it runs, the
    approval buttons when a call needs them. "Allow this tool for the rest of this
    session" is the caller's to keep (`_cell_runs.allowing`): it outlives the run."""

    def __init__(
        self,
        pump: CommPump | None,
        *,
        publish: Publish = ipython_publish,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._pump = pump
        self._publish = publish
        self._clock = clock or time.monotonic
        self._last_tick = float("-inf")
        self._lock = threading.Lock()
        self._running = False
        self._stop: Control | None = None
        self._stop_button: Any = None
        self.stopped = False  # the Stop button stopped the run
        # The press's SIGINT, sent to the main thread and not delivered yet there: the
        # run's own handler (installed by start) says when it is.
        self._owed = False
        self._previous_sigint: Any = None

    # ------------------------------------------------------------------ Stop
    def start(self) -> None:
        import ipywidgets as w  # noqa: PLC0415

        button = w.Button(
            description="Stop",
            icon="stop",
            button_style="warning",
            tooltip="Stop this run as an interrupt does: the abort is recorded; "
            "`%agent resume` continues it",
        )
        button.on_click(lambda _: self._stop_pressed())
        self._stop_button = button
        waiting = Record.of(
            "(a Stop button was here while the run ran; `%agent status` tells how it ended)"
        )
        with interrupt_held():
            self._running = True
            self._stop = Control(w.HBox([button]), waiting, self._publish)
        if threading.current_thread() is threading.main_thread():  # after the hold's end
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        """The run's SIGINT handler: the one that was installed (KeyboardInterrupt in a
        cell), noting that a press's interrupt owed to the main thread has arrived."""
        self._owed = False
        previous = self._previous_sigint
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    def _stop_pressed(self) -> None:
        """On whichever thread the press (the Stop button, or Stop in a question) is
        handled: the interrupt the kernel would get from "interrupt kernel", sent to the
        main thread itself, so that a wait there in a system call (the model's answer, a
        tool's process) is woken to raise it (the pump holds it until its read is done).
        The Stop button then says the press was taken."""
        with self._lock:
            if not self._running or self.stopped:
                return
            self.stopped = True
            self._owed = True
            main = threading.main_thread().ident
            if main is not None and hasattr(signal, "pthread_kill"):
                signal.pthread_kill(main, signal.SIGINT)
            else:  # no way to aim it at a thread: the process's, as "interrupt kernel"
                os.kill(os.getpid(), signal.SIGINT)
        button = self._stop_button
        if button is None:
            return
        try:
            with button.hold_sync():  # one update: the frontend never shows half of it
                button.disabled = True
                button.description = "Stopping…"
        except Exception:
            log.debug("could not say the Stop press was taken", exc_info=True)

    def tick(self, *, always: bool = False) -> None:
        """Handle clicks sent to the main shell (no subshell for the controls), at most
        every TICK unless `always`. A press whose interrupt has arrived, while the run
        still runs, was swallowed by the code it landed in (a tool's `except
        KeyboardInterrupt`): it is raised again here, at the run's next event."""
        if not self._running:
            return
        if self.stopped and not self._owed:
            raise KeyboardInterrupt
        if self._pump is None:
            return
        now = self._clock()
        if always or now - self._last_tick >= TICK:
            self._last_tick = now
            self._pump.pump()

    def closing(self) -> None:
        """On the main thread, just before the run's end is committed (the observer's
        `on_closing`): from here on a Stop press is a no-op, so that one arriving after
        the run's end never interrupts what the kernel does next (the cell's last lines,
        the cell after it). A press taken before is raised here, as KeyboardInterrupt,
        so the run ends stopped: also when the code it interrupted swallowed it."""
        with interrupt_held() as held:
            with self._lock:
                live, self._running = self._running, False
            if not (live and self.stopped):
                return
            # Sent while the lock was held: delivered here at once, or raised already.
            deadline = time.monotonic() + OWED_INTERRUPT_WAIT
            while self._owed and not held and time.monotonic() < deadline:
                time.sleep(0.001)
            if not held:
                raise KeyboardInterrupt

    def finish(self) -> None:
        with contextlib.suppress(KeyboardInterrupt):  # the run has ended: a press is moot
            self.closing()
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
            self._previous_sigint = None
        if self._stop is not None:
            with interrupt_held():
                self._stop.settle(None)

    # ------------------------------------------------------------------ approval
    def ask(self, tool: str, arguments: Mapping[str, Any]) -> Choice:
        """The call, whole, with Allow · Allow <tool> for the rest of this session · Deny ·
        Stop the run, each with its key; a cell change as its diff, with Accept · Reject ·
        Stop the run. Waits for a press (Ctrl-C or Stop end the wait and the run)."""
        diff = change_text(tool, arguments)
        change = diff is not None
        text = diff if diff is not None else approval_text(tool, arguments, whole=True)[0]
        if len(text) > SHOWABLE:
            return deny_unshowable(tool, len(text))

        name = cell_text(tool)
        # `✓ bash command="rm -rf build" — allowed by you`, or a change's answer above its
        # diff (`cell_text` already), whole.
        shown = text if change else cell_text(short_arguments(dict(arguments)))
        markup = (
            f"<pre>{html.escape(shown)}</pre>" if change else f" <code>{html.escape(shown)}</code>"
        )

        def record(mark: str, answer: str) -> Record:
            if change:
                return Record(
                    f"{mark} {name} — {answer}\n{shown}",
                    f"{mark} <b>{html.escape(name)}</b> — {html.escape(answer)}{markup}",
                )
            return Record(
                f"{mark} {name} {shown} — {answer}",
                f"{mark} <b>{html.escape(name)}</b>{markup} — {html.escape(answer)}",
            )

        answer = Answer()
        control: Control | None = None
        try:
            with interrupt_held():  # shown whole, or not at all
                control = Control(
                    _question(tool, text, answer, self._stop_pressed, change),
                    record(
                        "○",
                        f"asked {'to accept' if change else 'for approval'}, not answered "
                        f"here: {'nothing was changed' if change else 'the call did not run'} "
                        "(no buttons shown? interrupt the kernel to stop the run)",
                    ),
                    self._publish,
                    styled=False,  # the run's Stop button, shown before, carries it
                )
            wait_for(answer.given, self._pump)
        except KeyboardInterrupt:
            if control is not None:
                with interrupt_held():
                    control.settle(record("■", "not answered: the run was stopped"))
            raise
        choice = cast(Choice, answer.choice or "deny")
        said = {
            "allow": "accepted by you" if change else "allowed by you",
            "always": f"allowed by you, with every {name} call for the rest of this session",
            "deny": "rejected by you" if change else "denied by you",
        }[choice]
        with interrupt_held():
            control.settle(record("⊘" if choice == "deny" else "✓", said))
        return choice


class Answer:
    """The answer to a control's question (approval, rewind confirmation, Resume): a press,
    from whichever thread handles it. The first counts; `give` says if this one did."""

    def __init__(self) -> None:
        self.given = threading.Event()
        self.choice: str | None = None
        self._lock = threading.Lock()

    def give(self, choice: str) -> bool:
        with self._lock:
            if self.choice is not None:
                return False
            self.choice = choice
            self.given.set()
            return True


def _question(tool: str, text: str, answer: Answer, stop: Callable[[], None], change: bool) -> Any:
    """The question as a dialog asks it: Allow (Accept, for a cell change) has the focus
    (Enter), Esc denies (rejects). A cell change is accepted one at a time."""
    from ._keyed_buttons import Button, KeyedButtons  # noqa: PLC0415

    always = f"Allow {cell_text(tool)} for the rest of this session"
    buttons = [
        Button("allow", "Allow", ("a",), "success"),
        Button("always", always, ("r",), mark=always.rindex("rest")),
        Button("deny", "Deny", ("d", "Escape"), "danger"),
    ]
    if change:
        buttons = [
            Button("allow", "Accept", ("a",), "success"),
            Button("deny", "Reject", ("r", "Escape"), "danger"),
        ]
    buttons.append(Button("stop", "Stop the run", ("s",), "warning"))

    def press(name: str) -> None:  # one of the buttons' choices (KeyedButtons checks)
        if name == "stop":
            stop()
        else:
            answer.give(name)

    return KeyedButtons(text, buttons, press)
