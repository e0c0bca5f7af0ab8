"""The text view of the timeline is safe for a terminal wherever it is printed (the CLI,
`tiny-agent-nb demo`, the notebook display's text/plain), and its HTML view (the notebook
display, live or reopened) shows them as text: strings come from the file."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from tiny_agent_nb.render import timeline_html, timeline_text
from tiny_agent_nb.session import SessionStore, ToolIdentity
from tiny_agent_nb.timeline import ROWS_PER_RUN, build_timeline
from tiny_agent_nb.words import printable

from helpers.scenario import BASH, Run


def test_timeline_text_escapes_control_characters_in_prompts_arguments_and_errors(
    store: SessionStore,
) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("clear \x1b[2J the\nscreen"))
    store.commit(run.attempt())
    command = {"command": "printf '\x1b]0;pwned\x07'"}
    server = ToolIdentity(name="echo", version="1", source="mcp:srv\x1b[2J\x07")
    store.commit(run.answer(None, [("call_1", "bash", command), ("call_2", "srv__echo", {})]))
    intent = run.intent("call_1", BASH, command)
    store.commit([intent, Run.result(intent, "ok")])
    intent = run.intent("call_2", server, {})
    store.commit([intent, Run.result(intent, "ok")])
    store.commit(run.finish())

    for color in (False, True):
        text = timeline_text(build_timeline(store.load()), color=color)
        controls = {c for c in text if not c.isprintable() and c != "\n"}
        # colour codes are the renderer's own (ESC [ n m), never the file's
        assert controls <= ({"\x1b"} if color else set()), controls
        assert "\x07" not in text
        assert "clear \\x1b[2J the …" in text  # the first line, escaped
        assert "pwned" in text  # the tool's arguments are shown, escaped
        assert "srv__echo · mcp:srv\\x1b[2J\\x07" in text  # and where a tool comes from


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
    CR (before a line break too), bidi overrides and zero-width characters are shown as escapes."""
    text = "one\r\ntwo\tcols\rover \x1b[2J\x9b2J\x7f\x85\u202e\u200b\u2028end\n"
    shown = printable(text, keep_lines=True)
    assert shown == "one\\r\ntwo\tcols\\rover \\x1b[2J\\x9b2J\\x7f\\x85\\u202e\\u200b\\u2028end\n"
    assert printable(text).startswith("one\\r\\ntwo\\tcols\\rover")  # one line, all shown
    assert printable(shown, keep_lines=True) == shown  # escaping twice changes nothing


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.handlers: list[tuple[str, str]] = []
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.handlers += [(tag, name) for name, _ in attrs if name.startswith("on")]

    def handle_data(self, data: str) -> None:
        self.text += data


def test_timeline_html_shows_the_file_s_strings_as_text(store: SessionStore) -> None:
    """Prompt, tool name, arguments and result are the file's (the model's, a tool's):
    in the timeline's HTML, live or reopened, they are text, never elements or attributes."""
    tag = "<img src=x onerror=alert(1)>"
    quote = '"><script>alert(1)</script>'
    tool = ToolIdentity(name=f"tool{quote}", version="1", source=f"mcp:{tag}")
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start(f"prompt {tag}"))
    store.commit(run.attempt())
    command = {"command": f"echo {tag}"}
    store.commit(run.answer(None, [("call_1", tool.name, command)]))
    intent = run.intent("call_1", tool, command)
    store.commit([intent, Run.result(intent, f"out {tag}")])
    store.commit(run.finish())

    page = _Elements()
    page.feed(timeline_html(build_timeline(store.load())))
    page.close()
    assert page.tags <= {"style", "div", "b", "br", "span", "details", "summary", "code", "pre"}
    assert page.handlers == []
    assert f"prompt {tag}" in page.text
    assert f"tool{quote}" in page.text
    assert f"mcp:{tag}" in page.text  # the source, shown for a tool that is not built in
    assert f"out {tag}" in page.text


def test_timeline_html_shows_characters_no_one_sees_escaped(store: SessionStore) -> None:
    """The HTML view is where a user reads what a call did: a bidi override, a zero-width
    or another default-ignorable character from the file shows as its escape there, as in
    the text view and the approval question; a result keeps its lines."""
    command = {"command": "rm -rf build/\u202e/ # dry_run\u034f"}
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("clean \u200bup"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("call_1", "bash", command)]))
    intent = run.intent("call_1", BASH, command)
    store.commit([intent, Run.result(intent, "removed\nbuild\u2800")])
    store.commit(run.finish())

    page = timeline_html(build_timeline(store.load()))
    for char in "\u202e\u034f\u200b\u2800":
        assert char not in page, f"U+{ord(char):04X}"
    assert "clean \\u200bup" in page
    assert "build/\\u202e/ # dry_run\\u034f" in page  # the short arguments and the arguments
    assert "<pre>removed\nbuild\\u2800</pre>" in page


def test_the_whole_timeline_html_is_in_the_class_mathjax_skips(store: SessionStore) -> None:
    """JupyterLab typesets `$...$` in an HTML output: the prompt "The budget is $5 per day
    and we spent $3" showed as maths. The browser check is tests/test_browser_maths.py."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("The budget is $5 per day and we spent $3"))
    store.commit(run.attempt())
    store.commit(run.answer("Noted."))
    store.commit(run.finish())
    page = timeline_html(build_timeline(store.load()))
    assert page.startswith('<div class="tex2jax_ignore mathjax_ignore">')
    # the wrapper closes last: every other element is inside it
    depth = [0]
    for match in re.finditer(r"<(/?)div\b", page):
        depth.append(depth[-1] + (-1 if match.group(1) else 1))
    assert depth[-1] == 0 and 0 not in depth[1:-1] and page.endswith("</div>")
    assert "The budget is $5 per day and we spent $3" in page


def test_a_run_line_shows_the_prompts_first_line_not_its_code(store: SessionStore) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Run this for me:\n```bash\necho secret-sauce\n```\nthen report"))
    store.commit(run.attempt())
    store.commit(run.answer("Done."))
    store.commit(run.finish())
    timeline = build_timeline(store.load())
    text = timeline_text(timeline)
    assert "completed   run    Run this for me: …  [" in text, text
    page = _Elements()
    page.feed(timeline_html(timeline))
    page.close()
    assert "run Run this for me: …" in " ".join(page.text.split())
    for shown in (text, page.text):
        assert "```" not in shown and "echo secret-sauce" not in shown
