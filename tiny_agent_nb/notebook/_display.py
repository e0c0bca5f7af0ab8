"""What a `%%agent` cell shows while it runs: streamed text, tool lines, final markdown.

In a Jupyter kernel the answer is one display updated in place (markdown made safe by
`safe_markdown`, the answer itself as text/plain); in a terminal the text is printed as it
arrives, at most every UPDATE_INTERVAL (a `Throttle`: a pause, the model thinking, still
shows what came just before it).

Until the answer begins, the cell counts the seconds it waits, in one display (a slow
local model once showed a Stop button alone for 50 s). The count is drawn on the main
thread, when the provider tells of each second of silence (`Waiting`), not by a thread of
its own: a publish from another thread can wait up to 10 s on ipykernel's flush, and a
counting thread would have to be ordered against the answer and stopped on every way a
request ends. On the main thread no tick can come after the answer.

Every text shown went through the notebook's secrets: the streamed answer through a
`StreamRedactor` (never the first half of a key whose second half has not arrived), each
paragraph, tool line and note through `redact`: the saved notebook keeps what the file keeps.

A proposed cell (`cell_proposer`) is IPython's `set_next_input`: a payload on the running
execution's reply, which JupyterLab, Notebook 7 and VS Code insert as a cell below (a
terminal: the next prompt). IPython keeps one per execution, so a second proposal in one
agent cell is refused. A run the Resume button started has no reply (`has_reply`): its
code is shown in the output instead.
"""

from __future__ import annotations

import html
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from IPython.display import display

from ..agent import Compacted, LoopObserver, compaction_line
from ..provider import ProviderError, ReasoningDelta, StreamEvent, TextDelta, Waiting
from ..redaction import StreamRedactor, redact
from ..render import NO_MATHS, cell_text
from ..safe_markdown import safe_markdown
from ..session import ToolCall
from ..timeline import outcome_note
from ..tools import ToolError, ToolOutput, truncate
from ..words import printable, short_arguments, whole_sentences
from ._comm_pump import has_reply
from ._timeline_view import Publish, Throttle, ipython_publish
from ._user_cells import fence

UPDATE_INTERVAL = 0.1
WHY = 200  # characters of why a tool call failed, on its line in the cell
# A call's output under its line: in HTML its head and tail up to FOLDED_CHARS, folded; in
# text (a terminal, the saved notebook's text/plain) FOLDED_LINES first and last lines.
FOLDED_CHARS = 2000
FOLDED_LINES = 2
FOLDED_WIDTH = 120
FOLDED_STYLE = "max-height:16em;overflow:auto;white-space:pre-wrap;margin:2px 0 2px 1.5em"
WAITING_WORDS = "Waiting for the model…"  # then the seconds since the request was sent

log = logging.getLogger(__name__)

MARKS = {"completed": "✓", "error": "✗", "denied": "⊘", "interrupted": "⚠", "replayed": "↻"}


def answer_bundle(text: str) -> dict[str, str]:
    """The answer as a display bundle: the model's text is data, so the markdown a
    frontend renders is `safe_markdown`'s, and text/plain (terminals, `nbconvert --to
    script`, anything without markdown) is the answer itself with its control
    characters escaped, lines and tabs kept."""
    return {"text/plain": cell_text(text, keep_lines=True), "text/markdown": safe_markdown(text)}


class CellDisplay(LoopObserver):
    def __init__(
        self,
        *,
        rich: bool,
        secrets: Iterable[str] = (),
        publish: Publish = ipython_publish,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rich = rich
        self._secrets = tuple(secrets)
        self._publish = publish
        self._text = StreamRedactor(self._secrets)  # the paragraph streaming now
        self._printed = ""  # in a terminal: what of it was printed
        self._display_id: str | None = None  # the display of the paragraph streaming now
        self._drawn = ""  # what it shows
        self._thinking_shown = False
        # Held while the answer's display is drawn or its paragraph ends: the trailing
        # render (a timer thread) must never draw over the final answer (redacted as
        # committed) nor into a paragraph a tool line has closed.
        self._lock = threading.Lock()
        self._throttle = Throttle(UPDATE_INTERVAL, self._draw_late, clock)
        self._running: dict[str, str] = {}  # the calls started and not ended: id -> name
        self._counted: str | None = None  # the display counting the wait for the model
        # The model's answer has begun (text, reasoning, a call) since the cell's last
        # line: a silence now is the answer's, not a wait for it.
        self._answering = False

    def on_stream(self, event: StreamEvent) -> None:
        if isinstance(event, Waiting):
            self._count(event.seconds)
            return
        self._answering = True
        if not isinstance(event, TextDelta):
            self._end_count()
        if isinstance(event, ReasoningDelta):
            if not self._thinking_shown:
                self._thinking_shown = True
                print("… thinking", flush=True)
            return
        if not isinstance(event, TextDelta):
            return
        with self._lock:
            self._text.feed(event.text)
            if self._display_id is None:  # the count's display, if shown, is the answer's
                counted, self._counted = self._counted, None
                self._display_id = counted or _new_id()
                self._draw(update=counted is not None)
                return
            if self._throttle.due():
                self._draw(update=True)

    def _count(self, seconds: float) -> None:
        """The model has sent nothing of its answer yet: say so, with the seconds, in one
        display. Only in a rich frontend: a terminal would get a line each time."""
        if not self._rich or self._answering or self._display_id is not None:
            return
        bundle = {"text/plain": f"{WAITING_WORDS} {int(seconds)}s"}
        shown = self._counted is not None
        self._counted = self._counted or _new_id()
        self._publish(bundle, display_id=self._counted, update=shown)

    def _end_count(self, bundle: dict[str, str] | None = None) -> None:
        """The wait is over: its display shows `bundle` (the answer) or nothing."""
        counted, self._counted = self._counted, None
        if counted is not None:
            self._publish(bundle or {"text/plain": ""}, display_id=counted, update=True)

    def _print_more(self, shown: str) -> None:
        """In a terminal: print what `shown` adds to what was printed of the paragraph."""
        if shown.startswith(self._printed) and len(shown) > len(self._printed):
            sys.stdout.write(cell_text(shown[len(self._printed) :], keep_lines=True))
            sys.stdout.flush()
            self._printed = shown

    def _draw(self, *, update: bool) -> None:
        """Show the paragraph's text so far (the lock held); in a terminal, print what it
        adds to what was printed."""
        assert self._display_id is not None
        shown = self._text.shown()
        if self._rich:
            self._publish(answer_bundle(shown), display_id=self._display_id, update=update)
        else:
            self._print_more(shown)
        self._drawn = self._text.text
        # Counted from the end of a render: a long hostile answer slow to make safe
        # leaves the stream time to be read between two renders.
        self._throttle.rendered()

    def _draw_late(self) -> None:
        with self._lock:
            if self._display_id is not None and self._text.text != self._drawn:
                self._draw(update=True)

    def _close_paragraph(self) -> str | None:
        """Forget the paragraph's display (the lock held): returns its id, if it has one,
        for one last update. (A terminal's paragraph has an id too, never published: it
        is printed, at most every UPDATE_INTERVAL, as the rich display is drawn.)"""
        self._throttle.cancel()
        display_id, self._display_id = self._display_id, None
        self._drawn = ""
        return display_id

    def say(self, line: str) -> None:
        """Print one line of the cell's own (a tool line, a note), secrets redacted and
        control characters made visible."""
        self._end_count()
        self._answering = False  # what the model sends next is a new answer
        print(cell_text(redact(line, self._secrets)), flush=True)

    def on_retry(self, error: ProviderError, delay: float) -> None:
        self.say(f"↺ {error.message} — retrying in {delay:.0f}s as a new attempt")

    def on_notice(self, text: str) -> None:
        self.finish(None)  # a line of ours ends the paragraph
        self.say(f"Note: {text}")

    def on_compaction(self, compacted: Compacted) -> None:
        self.finish(None)  # a line of ours ends the paragraph
        self.say(f"⇊ {compaction_line(compacted)}")

    def on_tool_start(self, call: ToolCall, arguments: Mapping[str, Any]) -> None:
        self.finish(None)  # a line of ours ends the paragraph
        self._running[call.id] = call.name
        self.say(f"→ {call.name} {short_arguments(dict(arguments))}")

    def on_tool_end(self, call: ToolCall, output: ToolOutput, outcome: str) -> None:
        # A failure shows why (the result's last line: `[exit code 3]`, the exception),
        # not the first line of what the command printed; whole sentences of it.
        self._running.pop(call.id, None)
        why = output.ending if outcome != "completed" else ""
        detail = f" — {whole_sentences(why, WHY)}" if why else ""
        self.say(f"{MARKS.get(outcome, '·')} {call.name} {outcome}{detail}")
        if outcome in ("completed", "error") and output.content.strip():
            self._fold(output.content)

    def _fold(self, content: str) -> None:
        """A call's output (as committed: redacted) under its line: in a rich frontend
        folded (`<details>`, escaped as the timeline's results are), its head and tail
        when long; in a terminal its first and last lines, indented."""
        content = redact(content, self._secrets)
        lines = content.strip("\n").split("\n")  # a \r stays in its line, made visible
        if len(lines) > 2 * FOLDED_LINES:
            cut = len(lines) - 2 * FOLDED_LINES
            lines = [*lines[:FOLDED_LINES], f"… {cut} lines …", *lines[-FOLDED_LINES:]]
        text = "\n".join(f"    {cell_text(_cut(line))}" for line in lines)
        if not self._rich:
            print(text, flush=True)
            return
        shown = html.escape(printable(truncate(content, FOLDED_CHARS), keep_lines=True))
        markup = (
            f'{NO_MATHS}<details class="tan-tool-output"><summary>output</summary>'
            f'<pre style="{FOLDED_STYLE}">{shown}</pre></details></div>'
        )
        self._publish({"text/plain": text, "text/html": markup}, display_id=_new_id(), update=False)

    def stopped(self, reason: str | None) -> None:
        """The run was aborted for `reason` (as recorded): the calls it cut off say so,
        in the timeline's words."""
        running, self._running = self._running, {}
        for name in running.values():
            self.say(
                f"{MARKS['interrupted']} {name} interrupted — {outcome_note('interrupted', reason)}"
            )

    def finish(self, final: str | None) -> None:
        """End the paragraph streaming now: its last update is the whole paragraph, or
        `final`, the answer as committed (a secret the model repeated is redacted there),
        which replaces it: the saved notebook keeps what the file keeps. A line of the
        cell's own (a tool line, a note) ends the paragraph with `final` None."""
        with self._lock:
            display_id = self._close_paragraph()
            streamed = self._text.final()
            if not self._rich:
                if streamed:
                    self._print_more(streamed)
                    print(flush=True)
                elif final:
                    print(cell_text(final, keep_lines=True), flush=True)
            elif display_id is not None:
                bundle = answer_bundle(final or streamed)
                self._publish(bundle, display_id=display_id, update=True)
            elif final and self._counted is not None:
                self._end_count(answer_bundle(final))
            elif final:
                self._publish(answer_bundle(final), display_id=_new_id(), update=False)
            self._end_count()  # an answer with no text, an error, a stop: no count is left
            self._answering = False
            self._text = StreamRedactor(self._secrets)
            self._printed = ""


def _cut(line: str) -> str:
    """A line of output at most FOLDED_WIDTH characters, its spacing kept."""
    return line if len(line) <= FOLDED_WIDTH else line[: FOLDED_WIDTH - 1] + "…"


def _new_id() -> str:
    return f"tan-answer-{uuid.uuid4().hex}"


SECOND_PROPOSAL = (
    "a cell was already proposed during this agent cell, and the notebook shows only one "
    "per cell run; this one was not proposed. Put all the code in that one cell, or tell "
    "the user what to run."
)
INSERTED = "as a new cell below the agent cell"
SHOWN = (
    "as code shown in the run's output for the user to copy, not as a new cell: a run "
    "resumed with the Resume button has no cell run of its own for the notebook to insert "
    "one after"
)
SHOWN_HEADING = (
    "▸ Proposed code, **not inserted as a cell** (a run resumed with the Resume button has "
    "no cell run of its own to insert one after): copy it into a cell to run it."
)


def cell_proposer(shell: Any, secrets: Callable[[], tuple[str, ...]]) -> Callable[[str], str]:
    """`propose_cell` for the tools: the code as the next input, below the running cell,
    or shown where there is no reply to carry it. Returns where it went (`INSERTED`,
    `SHOWN`). `secrets`: what the shown code is redacted of, as every output is."""

    def propose(code: str) -> str:
        if not has_reply():
            shown = redact(code, secrets())
            marks = fence(shown)
            display(answer_bundle(f"{SHOWN_HEADING}\n\n{marks}python\n{shown}\n{marks}"), raw=True)
            return SHOWN
        if proposed_already(shell):
            raise ToolError(SECOND_PROPOSAL)
        shell.set_next_input(code, replace=False)
        return INSERTED

    return propose


def proposed_already(shell: Any) -> bool:
    """Whether this execution holds a next input already (ours or the user's code's)."""
    payloads = getattr(shell, "payload_manager", None)
    if payloads is not None:
        return any(
            isinstance(p, dict) and p.get("source") == "set_next_input"
            for p in payloads.read_payload()
        )
    return bool(getattr(shell, "rl_next_input", None))  # a terminal's next prompt
