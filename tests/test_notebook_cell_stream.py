"""The `%%agent` cell's streamed answer: one display updated in place, at most every
UPDATE_INTERVAL, and what came inside the interval before a pause in the stream is
drawn during the pause (a trailing render), never over the final answer."""

from __future__ import annotations

import threading

import pytest

from tiny_agent_nb.notebook._display import UPDATE_INTERVAL, CellDisplay
from tiny_agent_nb.provider import TextDelta
from tiny_agent_nb.session import ToolCall

from helpers.polling import wait_until

TIMEOUT = 10.0  # s; a trailing render comes UPDATE_INTERVAL after the text it draws


class Shown:
    """The displays as a frontend keeps them: the latest text of each display id."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.calls: list[tuple[str, bool, str]] = []

    def __call__(self, bundle: dict[str, str], *, display_id: str, update: bool) -> None:
        assert update == (display_id in self.texts)
        self.texts[display_id] = bundle["text/plain"]
        self.calls.append((display_id, update, bundle["text/plain"]))

    @property
    def latest(self) -> str:
        (text,) = self.texts.values()
        return text


def timers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if isinstance(t, threading.Timer)]


def test_text_that_came_just_before_a_pause_in_the_stream_is_drawn_during_the_pause() -> None:
    """The CI screenshot showed "Scr" alone: what came right after the first piece waited
    for the next piece, which a model thinking (or the end of the stream) holds back."""
    shown = Shown()
    cell = CellDisplay(rich=True, publish=shown, clock=lambda: 0.0)  # the clock stands still
    cell.on_stream(TextDelta("Scr"))  # drawn at once
    cell.on_stream(TextDelta("ipt"))  # inside the interval
    cell.on_stream(TextDelta("ed"))  # and the stream pauses here
    wait_until(lambda: shown.latest == "Scripted", TIMEOUT, "the trailing render")
    cell.finish("Scripted.")
    assert shown.latest == "Scripted."
    assert shown.calls[0][1:] == (False, "Scr")


def test_a_trailing_render_pending_at_the_end_never_draws_over_the_final_answer() -> None:
    """The final answer is the committed one (a secret the model repeated is redacted
    there): the streamed text must not come back over it."""
    shown = Shown()
    cell = CellDisplay(rich=True, publish=shown, clock=lambda: 0.0)
    before = set(timers())
    cell.on_stream(TextDelta("the key is "))
    cell.on_stream(TextDelta("sk-live-123"))  # inside the interval: a trailing render waits
    (pending,) = set(timers()) - before
    cell.finish("the key is [REDACTED]")
    pending.join(UPDATE_INTERVAL + TIMEOUT)
    assert not pending.is_alive()
    assert shown.latest == "the key is [REDACTED]"
    assert "sk-live-123" not in shown.calls[-1][2]


def test_a_tool_line_closes_the_paragraph_and_its_pending_render() -> None:
    """Text, then a tool call: the paragraph's display ends with all its text, and a
    new paragraph after the tool gets a display of its own."""
    shown = Shown()
    cell = CellDisplay(rich=True, publish=shown, clock=lambda: 0.0)
    before = set(timers())
    cell.on_stream(TextDelta("Let me "))
    cell.on_stream(TextDelta("look."))  # a trailing render waits
    (pending,) = set(timers()) - before
    cell.on_tool_start(ToolCall(id="call_1", name="list_files", arguments={}), {})
    pending.join(UPDATE_INTERVAL + TIMEOUT)
    assert not pending.is_alive()
    cell.on_stream(TextDelta("Done."))
    cell.finish("Done.")
    first, second = shown.texts
    assert shown.texts == {first: "Let me look.", second: "Done."}
    drawn = [(update, text) for i, update, text in shown.calls if i == first]
    assert drawn[0] == (False, "Let me ") and drawn[-1] == (True, "Let me look.")
    assert [(u, t) for i, u, t in shown.calls if i == second] == [(False, "Done."), (True, "Done.")]


KEY = "sk-or-v1-STREAMED-0123456789abcdef"


def pieces_of(key: str) -> list[str]:
    """Every run of 4 characters of `key`: none may show in any update."""
    return [key[i : i + 4] for i in range(len(key) - 3)]


def test_a_key_streamed_in_pieces_shows_in_no_update_of_the_paragraph_a_tool_closes() -> None:
    """Text streamed three characters at a time, then a tool call: every update and the
    paragraph's last one show the key as [redacted], as the session file keeps it (the
    paragraph's last update used to be its raw text)."""
    shown = Shown()
    ticks = iter(range(10_000))
    # Each render is a whole interval after the last: every piece is drawn at once.
    cell = CellDisplay(
        rich=True, secrets=[KEY], publish=shown, clock=lambda: next(ticks) * UPDATE_INTERVAL
    )
    text = f"The key is {KEY}; let me check it."
    for i in range(0, len(text), 3):
        cell.on_stream(TextDelta(text[i : i + 3]))
    cell.on_tool_start(ToolCall(id="c1", name="bash", arguments={}), {"command": "[redacted]"})
    cell.finish(None)
    assert shown.latest == "The key is [redacted]; let me check it."
    assert len(shown.calls) > 10
    for _, _, update in shown.calls:
        assert not any(piece in update for piece in pieces_of(KEY)), update


def test_a_key_streamed_to_a_terminal_is_printed_redacted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cell = CellDisplay(rich=False, secrets=[KEY])
    text = f"Use {KEY} here.\nAnd again: {KEY}"
    for i in range(0, len(text), 2):
        cell.on_stream(TextDelta(text[i : i + 2]))
    cell.on_notice(f"the server said {KEY}")
    cell.on_stream(TextDelta("Bye."))
    cell.finish(None)
    out = capsys.readouterr().out
    assert out == (
        "Use [redacted] here.\nAnd again: [redacted]\nNote: the server said [redacted]\nBye.\n"
    )
