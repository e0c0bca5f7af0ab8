"""A run driven from a cell (`%%agent`, `%agent resume`, a Resume button): what it shows
while it runs, how it asks before a tool that changes things, and what it leaves.

In a Jupyter frontend a person answers (`_controls.controls_available`), the run has a
Stop button and asks with buttons, and a run that stopped before its answer gets a
Resume button; elsewhere (terminal IPython, nbclient) it asks with `input()` as it
always did, and `%agent resume` is said in text. Either way an answer "every call of this
tool for the rest of this session" is kept by the runtime for its session (`allowing`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from IPython.core.error import StdinNotImplementedError

from ..agent import Compacted, LoopObserver, RunResult
from ..provider import ProviderError, StreamEvent
from ..render import cell_text
from ..session import Operation, ToolCall
from ..tools import ToolOutput
from ._advice import resume_words
from ._approval import Choice, ask_approval
from ._comm_pump import CommPump, later_in_this_cell
from ._controls import RunControls, controls_available
from ._display import CellDisplay
from ._loops import AskFn
from ._resume_offer import ResumeOffer
from ._shutdown import STOP_BUTTON

Go = Callable[[LoopObserver, AskFn], RunResult]
Choose = Callable[[str, Mapping[str, Any]], Choice]


class CellRuns:
    def __init__(
        self,
        shell: Any,
        *,
        rich: bool,
        stopped_run: Callable[[], Operation | None],
        interrupted: Callable[[bool], str],
        allowed: set[str],
    ) -> None:
        """`stopped_run`: the run `%agent resume` would continue now, if any (the
        engine's rule, asked, not copied); `interrupted`: what a run stopped by a
        KeyboardInterrupt says last, given whether the Stop button sent it (a kernel
        shutting down says so); `allowed`: the tools the user allowed for the rest of
        the session (the runtime's, kept by `allowing`)."""
        self._shell = shell
        self._interrupted = interrupted
        self._rich = rich
        self._stopped_run = stopped_run
        self._allowed = allowed
        self.offers: list[ResumeOffer] = []  # Resume buttons still live
        self._controls: RunControls | None = None  # the running run's

    def stopped_by(self) -> str | None:
        """The running run's Stop button, when it was pressed: the abort's reason
        (`AgentLoop`'s `stopped_by`)."""
        controls = self._controls
        return STOP_BUTTON if controls is not None and controls.stopped else None

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
            print(self._interrupted(controls is not None and controls.stopped))
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
