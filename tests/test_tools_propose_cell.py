"""propose_cell: code handed to the notebook as a new cell, never run; refused when a
reader could not see what would run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tiny_agent_nb.tools import ToolContext, ToolError
from tiny_agent_nb.tools._propose import ProposeCell


def propose(code: str) -> tuple[str, bool, list[str]]:
    proposed: list[str] = []

    def put(code: str) -> str:
        proposed.append(code)
        return "where the notebook put it"

    output = ProposeCell().run({"code": code}, ToolContext(Path("/"), propose_cell=put))
    return output.content, output.is_error, proposed


def test_the_code_goes_to_the_notebook_and_the_result_says_where_and_that_it_did_not_run() -> None:
    text, error, proposed = propose("import math\r\nmath.pi\n\n")
    assert not error
    assert proposed == ["import math\nmath.pi"]
    assert text == (
        "Proposed 2 line(s) of code where the notebook put it. It has not run: the user "
        "reviews it and runs it if they choose, so nothing it does has happened yet."
    )


@pytest.mark.parametrize(
    ("code", "found"),
    [
        # Trojan Source: the comment's end is really inside a string
        (
            'access = "user\u202e \u2066# admin\u2069 \u2066"',
            "U+202E at line 1, U+2066 at line 1, U+2069 at line 1, U+2066 at line 1",
        ),
        ("x = 1\ny\u200b = 2", "U+200B at line 2"),
        ("\u3164 = 'a Hangul filler is a valid, invisible name'", "U+3164 at line 1"),
        ("s = 'a\ufe0f'", "U+FE0F at line 1"),
        ("print('bell\x07')", "U+0007 at line 1"),
        ("a = 1\u2028b = 2", "U+2028 at line 1"),
        ("x = '\U000e0041'", "U+E0041 at line 1"),  # a tag character
        # printable, and still no one sees them (Python accepts the first ones in a name)
        ("dry_run\u034f = True", "U+034F at line 1"),
        ("dry_run\u17b4\u17b5 = True", "U+17B4 at line 1, U+17B5 at line 1"),
        (
            "x\u180b\u180c = 1\ny\u180d\u180f = 2",
            "U+180B at line 1, U+180C at line 1, U+180D at line 2, U+180F at line 2",
        ),
        ("s = '\u2800'", "U+2800 at line 1"),  # BRAILLE PATTERN BLANK
        ("s = 'a\u3000b'", "U+3000 at line 1"),  # IDEOGRAPHIC SPACE: two columns of nothing
        ("s = '\t\u0301'", "U+0301 at line 1"),  # an accent on nothing
        ("s = 'e" + "\u0301" * 5 + "'", "U+0301 at line 1"),  # piled over the lines around
    ],
)
def test_characters_a_reader_cannot_see_are_refused(code: str, found: str) -> None:
    text, error, proposed = propose(code)
    assert error
    assert proposed == []
    assert f"({found})" in text
    assert "nothing was proposed" in text


@pytest.mark.parametrize(
    ("fits", "wider"),
    [
        ("x = 1" + " " * 95, "x = 1" + " " * 96),
        # what follows a gap is on screen while the line fits; past it, it is not
        ("x = 1;" + " " * 39 + "f()".rjust(55), "x = 1;" + " " * 40 + "f()".rjust(55)),
        # a tab reaches the next multiple of 4
        ("\t" * 24 + "pass", "\t" * 25 + "x"),
        ("abc\t" + "x" * 96, "abcd\t" + "x" * 93),
        # East Asian wide characters take 2 columns, a mark none
        ("s = '" + "\u6570" * 47 + "'", "s = '" + "\u6570" * 48 + "'"),
        ("s = '" + "e\u0301" * 94 + "'", "s = '" + "e\u0301" * 95 + "'"),
    ],
)
def test_a_line_wider_than_a_cell_shows_is_refused_and_one_that_fits_is_kept(
    fits: str, wider: str
) -> None:
    assert propose(f"import os\n{fits}")[2] == [f"import os\n{fits}"]
    text, error, proposed = propose(f"import os\n{wider}")
    assert error and proposed == []
    said = r"line\(s\) 2 \(10[12] columns\) are wider than the 100 columns a notebook cell"
    assert re.match(said, text), text
    assert "Wrap the code" in text


def test_a_refusal_names_the_first_wide_lines() -> None:
    text, error, _ = propose("\n".join(["x" * 120] * 7))
    assert error
    assert text.startswith(
        "line(s) 1 (120 columns), 2 (120 columns), 3 (120 columns), 4 (120 columns), "
        "5 (120 columns), … are wider"
    )


def test_tabs_and_unicode_a_reader_sees_are_kept() -> None:
    code = "def f():\n\treturn 'naïve café 数据 ✓'"
    assert propose(code)[2] == [code]


def test_an_empty_or_overlong_cell_is_refused() -> None:
    assert propose(" \n\n")[:2] == ("the cell is empty; nothing was proposed", True)
    text, error, proposed = propose("x = 1\n" * 5000)
    assert error and proposed == []
    assert "more than the 20000 a user can review" in text


def test_without_a_notebook_nothing_is_proposed() -> None:
    output = ProposeCell().run({"code": "1"}, ToolContext(Path("/")))
    assert (output.content, output.is_error) == (
        "there is no notebook to put a cell in; nothing was proposed",
        True,
    )


def test_the_notebook_refusing_a_second_cell_is_the_result() -> None:
    def refuse(code: str) -> str:
        raise ToolError("a cell was already proposed")

    output = ProposeCell().run({"code": "1"}, ToolContext(Path("/"), propose_cell=refuse))
    assert (output.content, output.is_error) == ("a cell was already proposed", True)
