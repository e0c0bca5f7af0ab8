"""propose_cell: code handed to the notebook as a new cell, never run; refused when a
reader could not see what would run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_agent_nb.tools import ProposeCell, ToolContext, ToolError


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
    ],
)
def test_characters_a_reader_cannot_see_are_refused(code: str, found: str) -> None:
    text, error, proposed = propose(code)
    assert error
    assert proposed == []
    assert f"({found})" in text
    assert "nothing was proposed" in text


@pytest.mark.parametrize(
    "code",
    [
        "x = 1;" + " " * 200 + "__import__('os').system('rm -rf ~')",
        "data = '" + "a" * 400 + "'",
    ],
)
def test_a_line_that_runs_off_to_the_right_is_refused(code: str) -> None:
    text, error, proposed = propose(f"import os\n{code}")
    assert error and proposed == []
    assert text.startswith("line(s) 2 run off to the right")


def test_indentation_and_aligned_comments_are_kept() -> None:
    code = "def f():\n" + " " * 36 + "return 1  # aligned" + "\n" + "x = 1" + " " * 30 + "# note"
    assert propose(code)[2] == [code]


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
