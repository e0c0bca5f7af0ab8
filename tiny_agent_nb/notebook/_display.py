"""What a `%%agent` cell shows while it runs: streamed text, tool lines, final markdown.

In a Jupyter kernel the answer is one display that updates in place (markdown made
safe by `safe_markdown`, with the answer itself as text/plain); in a terminal the text
is printed as it arrives.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from IPython.display import display

from ..agent import Compacted, LoopObserver, compaction_line
from ..provider import ProviderError, ReasoningDelta, StreamEvent, TextDelta
from ..render import cell_text
from ..safe_markdown import safe_markdown
from ..session import ToolCall
from ..timeline import short_arguments
from ..tools import ToolOutput

UPDATE_INTERVAL = 0.1

MARKS = {"completed": "✓", "error": "✗", "denied": "⊘", "interrupted": "⚠", "replayed": "↻"}


def answer_bundle(text: str) -> dict[str, str]:
    """The answer as a display bundle: the model's text is data, so the markdown a
    frontend renders is `safe_markdown`'s, and text/plain (terminals, `nbconvert --to
    script`, anything without markdown) is the answer itself with its control
    characters escaped, lines and tabs kept."""
    return {"text/plain": cell_text(text, keep_lines=True), "text/markdown": safe_markdown(text)}


class CellDisplay(LoopObserver):
    def __init__(self, *, rich: bool) -> None:
        self._rich = rich
        self._text = ""
        self._handle: Any = None
        self._last = 0.0
        self._thinking_shown = False

    def on_stream(self, event: StreamEvent) -> None:
        if isinstance(event, ReasoningDelta):
            if not self._thinking_shown:
                self._thinking_shown = True
                print("… thinking", flush=True)
            return
        if not isinstance(event, TextDelta):
            return
        self._text += event.text
        if not self._rich:
            sys.stdout.write(cell_text(event.text, keep_lines=True))
            sys.stdout.flush()
            return
        if self._handle is None:
            self._handle = display(answer_bundle(self._text), raw=True, display_id=True)
        elif time.monotonic() - self._last >= UPDATE_INTERVAL:
            self._handle.update(answer_bundle(self._text), raw=True)
        else:
            return
        # Counted from the end of a render: a long hostile answer slow to make safe
        # leaves the stream time to be read between two renders.
        self._last = time.monotonic()

    def on_retry(self, error: ProviderError, delay: float) -> None:
        print(
            f"↺ {cell_text(error.message)} — retrying in {delay:.0f}s as a new attempt", flush=True
        )

    def on_notice(self, text: str) -> None:
        self._end_text()
        print(f"Note: {cell_text(text)}", flush=True)

    def on_compaction(self, compacted: Compacted) -> None:
        self._end_text()
        print(f"⇊ {compaction_line(compacted)}", flush=True)

    def on_tool_start(self, call: ToolCall, arguments: Mapping[str, Any]) -> None:
        self._end_text()
        summary = short_arguments(dict(arguments))
        print(f"→ {cell_text(call.name)} {cell_text(summary)}", flush=True)

    def on_tool_end(self, call: ToolCall, output: ToolOutput, outcome: str) -> None:
        # A failure shows why (the result's last line: `[exit code 3]`, the exception),
        # not the first line of what the command printed.
        why = output.ending if outcome != "completed" else ""
        detail = f" — {cell_text(why[:100])}" if why else ""
        print(f"{MARKS.get(outcome, '·')} {cell_text(call.name)} {outcome}{detail}", flush=True)

    def _end_text(self) -> None:
        """A tool line closes the current paragraph of streamed text."""
        if self._text and self._handle is not None:
            self._handle.update(answer_bundle(self._text), raw=True)
        elif self._text and not self._rich:
            print(flush=True)
        self._text = ""
        self._handle = None

    def finish(self, final: str | None) -> None:
        """Render the final answer as markdown (once, complete). `final` is the answer as
        committed (a secret the model repeated is redacted there), so it replaces the
        streamed text: the saved notebook keeps what the file keeps."""
        if self._rich:
            if self._handle is not None:
                self._handle.update(answer_bundle(final or self._text), raw=True)
            elif final:
                display(answer_bundle(final), raw=True)
        elif self._text:
            print(flush=True)
        elif final:
            print(cell_text(final, keep_lines=True), flush=True)
        self._text = ""
        self._handle = None
