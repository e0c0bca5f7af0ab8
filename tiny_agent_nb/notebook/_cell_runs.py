"""A run driven from a cell (`%%agent`, `%agent resume`, a Resume button): what it shows
while it runs, how it asks before a tool that changes things, and what it leaves.

Where a person answers in a Jupyter frontend (`controls_available`) the run has a Stop
button, asks with buttons, and gets a Resume button when it stopped before its answer;
elsewhere (a terminal, nbclient) it asks with `input()` and says `%agent resume` in text.

Which stop a KeyboardInterrupt was (`ShutdownWatch`): jupyter_client ends a kernel (a
restart too) by interrupting it and then sending `shutdown_request`, which ipykernel
answers by setting the shell's `exit_now`. So a stopped run waits briefly
(`SHUTDOWN_GRACE`) for that request before it records its abort: both are sent back to
back, so the wait costs a restart nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from IPython.core.error import StdinNotImplementedError

from ..agent import Compacted, LoopObserver, RunResult
from ..provider import ProviderError, StreamEvent
from ..render import cell_text
from ..session import Operation, ToolCall
from ..tools import ToolError, ToolOutput, change_diff
from ._approval import Choice, ask_approval
from ._comm_pump import CommPump, later_in_this_cell
from ._controls import Answer, Control, Record, RunControls, controls_available
from ._display import CellDisplay
from ._loops import AskFn
from ._report import resume_words
from ._timeline_view import ipython_publish

Go = Callable[[LoopObserver, AskFn], RunResult]
Choose = Callable[[str, Mapping[str, Any]], Choice]


class CellRuns:
    def __init__(
        self,
        shell: Any,
        *,
        rich: bool,
        stopped_run: Callable[[], Operation | None],
        allowed: set[str],
    ) -> None:
        """`stopped_run`: the run `%agent resume` would continue now, if any (the
        engine's rule, asked, not copied); `allowed`: the tools the user allowed for the
        rest of the session (the runtime's, kept by `allowing`)."""
        self._shell = shell
        self._rich = rich
        self._stopped_run = stopped_run
        self._allowed = allowed
        self.shutdown = ShutdownWatch(shell)
        self.offers: list[ResumeOffer] = []  # Resume buttons still live
        self._controls: RunControls | None = None  # the running run's

    def stopped_by(self) -> str | None:
        """`AgentLoop`'s `stopped_by`: who stopped the running run, its Stop button (known
        at once) or a kernel restart or shutdown (waited for); None: the user's interrupt."""
        controls = self._controls
        if controls is not None and controls.stopped:
            return STOP_BUTTON
        return self.shutdown.stopped_by()

    def controls(self) -> bool:
        """Buttons instead of `input()`: asked per cell, since it depends on the frontend
        that sent the cell (stdin allowed or not)."""
        return self._rich and controls_available(self._shell)

    def drive(self, go: Go, resume: Callable[[], None], view: CellDisplay) -> RunResult | None:
        """One run, shown in this cell by `view`. None when it was interrupted (said here,
        with a Resume button that calls `resume`)."""
        self.withdraw_offers()  # they would no longer resume what they were shown under
        controls = RunControls(CommPump.of(self._shell)) if self.controls() else None
        self._controls = controls
        observer: LoopObserver = view
        choose: Choose = ask_with_input
        try:
            if controls is not None:
                controls.start()
                observer = TickingObserver(view, controls.tick, controls.closing)
                choose = controls.ask
            result = go(observer, allowing(choose, self._allowed))
        except KeyboardInterrupt:
            view.finish(None)
            if controls is not None:
                controls.finish()
            aborted = self._stopped_run()
            if aborted is not None and aborted.status == "aborted":
                view.stopped(aborted.aborted_reason)  # the calls it cut off, as recorded
            stop_button = controls is not None and controls.stopped
            print(interrupted_line(shutting_down=self.shutdown.asked, stop_button=stop_button))
            self.offer_resume(resume)
            return None
        finally:
            self._controls = None
            if controls is not None:
                controls.finish()
        view.finish(result.text if result.outcome == "completed" else None)
        return result

    def offer_resume(self, resume: Callable[[], None]) -> None:
        """A Resume button when `%agent resume` would continue a run (one that stopped
        before its answer); a click calls `resume` (what `%agent resume` runs) on the
        main shell, once it is free. Either says the options the resume keeps."""
        stopped = self._stopped_run()
        if stopped is None:
            return
        words = None if stopped.options is None else resume_words(stopped.options)
        if not self.controls():
            if words is not None:
                print(f"↻ `%agent resume` keeps the run's options: {words}")
            return
        schedule = later_in_this_cell(self._shell)
        if schedule is not None:
            self.offers.append(ResumeOffer(resume, schedule, options=words))

    def withdraw_offers(self) -> None:
        offers, self.offers = self.offers, []
        for offer in offers:
            offer.withdraw()


def allowing(choose: Choose, allowed: set[str]) -> AskFn:
    """The loop's question (`--approve ask`): `choose`'s answer, unless the user allowed
    every call of the tool for the rest of the session (`allowed`, which an answer
    "always" adds to). Under `auto` and `deny` the loop asks nothing, so neither is
    changed by what was allowed here."""

    def ask(tool: str, arguments: object) -> bool:
        if tool in allowed:
            return True
        choice = choose(tool, arguments if isinstance(arguments, Mapping) else {})
        if choice == "always":
            allowed.add(tool)
        return choice != "deny"

    return ask


def ask_with_input(tool: str, arguments: Mapping[str, Any]) -> Choice:
    """The approval as a prompt (a terminal, or a frontend without buttons)."""
    try:
        return ask_approval(tool, arguments, input)
    except (StdinNotImplementedError, EOFError):
        if change_diff(tool, dict(arguments)) is not None:  # the tool falls back
            raise ToolError("no one can be asked to accept a diff here") from None
        print(
            f"(no way to ask here: {cell_text(tool)} was not allowed. `%%agent --approve auto`, "
            'or `%config TinyAgent.approve = "auto"` for this kernel, runs such calls '
            "without asking)"
        )
        return "deny"


class TickingObserver(LoopObserver):
    """`inner`, with `tick()` before each event: the run's moments to read clicks that
    were sent to the main shell (a Stop click where the kernel has no subshell for the
    controls). Before a call is committed as started, and after one returned (what comes
    next is another call or the next request), the read is not skipped for being soon
    after the last one: a click already sent is read before any further effect."""

    def __init__(
        self,
        inner: LoopObserver,
        tick: Callable[..., None],
        closing: Callable[[], None] = lambda: None,
    ) -> None:
        self._inner = inner
        self._tick = tick
        self._closing = closing

    def on_closing(self) -> None:
        self._closing()
        self._inner.on_closing()

    def on_stream(self, event: StreamEvent) -> None:
        self._tick()
        self._inner.on_stream(event)

    def on_retry(self, error: ProviderError, delay: float) -> None:
        self._tick()
        self._inner.on_retry(error, delay)

    def on_tool_ready(self, call: ToolCall) -> None:
        self._tick(always=True)
        self._inner.on_tool_ready(call)

    def on_tool_start(self, call: ToolCall, arguments: Mapping[str, Any]) -> None:
        self._tick()
        self._inner.on_tool_start(call, arguments)

    def on_tool_end(self, call: ToolCall, output: ToolOutput, outcome: str) -> None:
        self._tick(always=True)
        self._inner.on_tool_end(call, output, outcome)

    def on_notice(self, text: str) -> None:
        self._inner.on_notice(text)

    def on_compaction(self, compacted: Compacted) -> None:
        self._tick()
        self._inner.on_compaction(compacted)


# An abort's reasons (`abortRequested.reason`) other than Ctrl-C, as every surface says them.
STOP_BUTTON = "stopped with the Stop button"
RESTARTED = "stopped by a kernel restart"
SHUT_DOWN = "stopped by a kernel shutdown"
# Seconds a run stopped by a KeyboardInterrupt waits for a shutdown request to follow.
SHUTDOWN_GRACE = 0.5


class ShutdownWatch:
    """Follows one shell's `exit_now`; `stopped_by()` is `AgentLoop`'s question."""

    def __init__(self, shell: Any) -> None:
        self._shell = shell
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
        if self.active and self._asked.wait(SHUTDOWN_GRACE):
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


# ---------------------------------------------------------------- the Resume button


class ResumeOffer:
    """A Resume button under a run that stopped before its answer. A click runs what
    `%agent resume` runs (`resume`), on the main thread once it is free, its output under
    this cell's; the kernel never runs it on the thread that handled the click."""

    def __init__(
        self,
        resume: Callable[[], None],
        schedule: Callable[[Callable[[], None]], None],
        *,
        options: str | None = None,
    ) -> None:
        """`options`: the words of the options the resume keeps (`resume_words`), shown
        beside the button, so the click continues the run as it is seen to."""
        import ipywidgets as w  # noqa: PLC0415

        self._resume = resume
        self._schedule = schedule
        self._answer = Answer()
        kept = f": {options}" if options else ""
        self._button = w.Button(
            description="Resume",
            icon="play",
            button_style="primary",
            tooltip=f"Continue this run, as `%agent resume` does{kept}",
        )
        self._button.on_click(lambda _: self._click())
        waiting = Record.of(
            "↻ `%agent resume` continues this run{kept} (the Resume button shown here "
            "needs the kernel that showed it)",
            kept=kept,
        )
        self.control = Control(w.HBox([self._button]), waiting, ipython_publish)

    def _click(self) -> None:
        if self.control.settled or not self._answer.give("resume"):
            return
        # Said at once, from whichever thread handles the click: the kernel may be busy.
        self._button.disabled = True
        self._button.description = "Resume: waiting for the kernel"
        self._schedule(self._run)

    def _run(self) -> None:
        if self.control.settled:  # a run started before the kernel got to this one
            return
        self.control.settle(Record.of("↻ resumed by you (as `%agent resume`)"))
        self._resume()

    def withdraw(self) -> None:
        """A later run started (or the session changed, or the extension was unloaded):
        the button would no longer resume what it was shown under."""
        first = "↻ clicked, but another run started first; " if self._answer.choice else "↻ "
        self.control.settle(
            Record.of("{first}`%agent resume` continues the latest stopped run", first=first)
        )
