"""The text view of the timeline is safe for a terminal wherever it is printed (the CLI,
`tiny-agent-nb demo`, the widget's text/plain fallback): strings come from the file."""

from __future__ import annotations

from tiny_agent_nb.render import printable, timeline_text
from tiny_agent_nb.session import SessionStore
from tiny_agent_nb.timeline import ROWS_PER_RUN, build_timeline

from scenario import BASH, Run


def test_timeline_text_escapes_control_characters_in_prompts_arguments_and_errors(
    store: SessionStore,
) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("clear \x1b[2J the\nscreen"))
    store.commit(run.attempt())
    command = {"command": "printf '\x1b]0;pwned\x07'"}
    store.commit(run.answer(None, [("call_1", "bash", command)]))
    intent = run.intent("call_1", BASH, command)
    store.commit([intent, Run.result(intent, "ok")])
    store.commit(run.finish())

    for color in (False, True):
        text = timeline_text(build_timeline(store.load()), color=color)
        controls = {c for c in text if not c.isprintable() and c != "\n"}
        # colour codes are the renderer's own (ESC [ n m), never the file's
        assert controls <= ({"\x1b"} if color else set()), controls
        assert "\x07" not in text
        assert "clear \\x1b[2J the screen" in text
        assert "pwned" in text  # the tool's arguments are shown, escaped


def test_a_long_run_shows_its_latest_tool_rows_and_counts_all_of_its_cost(
    store: SessionStore,
) -> None:
    steps = ROWS_PER_RUN + 2
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("many tool calls"))
    for n in range(steps):
        store.commit(run.attempt())
        store.commit(run.answer(None, [(f"call_{n}", "bash", {"command": f"echo {n}"})]))
        intent = run.intent(f"call_{n}", BASH, {"command": f"echo {n}"})
        store.commit([intent, Run.result(intent, f"out-{n}")])
    store.commit(run.finish())

    (row,) = build_timeline(store.load()).runs
    assert row.hidden_tools == 2 and len(row.tools) == ROWS_PER_RUN
    assert [t.result for t in row.tools] == [f"out-{n}" for n in range(2, steps)]
    assert row.hidden_attempts == 2
    assert row.cost == round(steps * 0.001, 12)  # hidden rows' usage still counts


def test_printable_text_keeps_its_lines_and_tabs_and_shows_every_other_control() -> None:
    """Streamed model text keeps its layout; C0, C1 (the one-byte CSI `\x9b`), DEL, a
    lone CR, bidi overrides and zero-width characters are shown as escapes."""
    text = "one\r\ntwo\tcols\rover \x1b[2J\x9b2J\x7f\x85\u202e\u200b\u2028end\n"
    shown = printable(text, keep_lines=True)
    assert shown == "one\ntwo\tcols\\rover \\x1b[2J\\x9b2J\\x7f\\x85\\u202e\\u200b\\u2028end\n"
    assert printable(text).startswith("one\\r\\ntwo\\tcols\\rover")  # one line, all shown
    assert printable(shown, keep_lines=True) == shown  # escaping twice changes nothing
