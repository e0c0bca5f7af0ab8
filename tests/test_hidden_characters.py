"""The one rule for text a person reviews (`words.hidden_at`, `words.printable`): every
character a reader does not see as itself is shown as its escape, decided by Unicode's
properties; what a reader sees (accents, CJK, an emoji's presentation) stays as it is."""

from __future__ import annotations

import sys
import unicodedata

from tiny_agent_nb.words import hidden_at, printable


def test_characters_python_prints_but_no_one_sees_are_escaped() -> None:
    shown = {
        # Other_Default_Ignorable_Code_Point: Python accepts each in a name
        "dry_run\u034f = True": "dry_run\\u034f = True",  # COMBINING GRAPHEME JOINER
        "a\u17b4\u17b5": "a\\u17b4\\u17b5",  # Khmer inherent vowels
        "\u3164 = 1": "\\u3164 = 1",  # Hangul fillers, letters that draw nothing
        "x\u115f\u1160\uffa0": "x\\u115f\\u1160\\uffa0",
        # Variation_Selector: on a letter, or one after another, they carry hidden bytes
        "dry_run\u180b\u180c\u180d\u180f": "dry_run\\u180b\\u180c\\u180d\\u180f",
        "key\ufe00": "key\\ufe00",
        "a\ufe0f": "a\\ufe0f",
        "\u26a0\ufe0f\ufe0e": "\u26a0\ufe0f\\ufe0e",  # the first, after a symbol, shows
        "\U0001f600\U000e0100": "\U0001f600\\U000e0100",
        # blank-looking: Unicode names it a blank
        "s = '\u2800'": "s = '\\u2800'",
        # marks on nothing (a space, a line's start, a hidden character), or piled up
        "x = ' \u0301'": "x = ' \\u0301'",
        "\u20dd!": "\\u20dd!",  # an enclosing circle
        "\u200b\u0301": "\\u200b\\u0301",
        "e" + "\u0301" * 6: "e" + "\u0301" * 4 + "\\u0301" * 2,
        # what a reader sees is kept
        "caf\u00e9 cafe\u0301 Vi\u1ec7t Vie\u0323\u0302t \u6570\u636e \u2714\ufe0f": (
            "caf\u00e9 cafe\u0301 Vi\u1ec7t Vie\u0323\u0302t \u6570\u636e \u2714\ufe0f"
        ),
    }
    for text, expected in shown.items():
        assert printable(text) == expected, ascii(text)
        assert printable(expected) == expected, ascii(text)  # escaping twice: no change


def test_line_breaks_and_tabs_are_kept_and_a_mark_after_them_is_not() -> None:
    shown = printable("a\n\u0301b\t\u0301c\u2028d\u3000e", keep_lines=True)
    assert shown == "a\n\\u0301b\t\\u0301c\\u2028d\\u3000e"


def test_a_carriage_return_before_a_line_break_is_shown() -> None:
    """bash reads `cd build\\r` as another directory: a reviewer must see the `\\r`."""
    assert printable("cd build\r\nrm -rf *", keep_lines=True) == "cd build\\r\nrm -rf *"


def test_every_printable_default_ignorable_character_is_hidden_wherever_it_stands() -> None:
    """Default_Ignorable_Code_Point (DerivedCoreProperties.txt) is Other_Default_Ignorable_
    Code_Point + Cf + Variation_Selector - White_Space - ...; Cf is not printable. Found
    here by their names, not by the ranges the rule holds: every variation selector, every
    filler, and the other three Python prints."""
    printed_ignorables = [
        chr(p)
        for p in range(sys.maxunicode + 1)
        if chr(p).isprintable()
        and (
            "VARIATION SELECTOR" in unicodedata.name(chr(p), "")
            or unicodedata.name(chr(p), "").endswith(" FILLER")
            or p in (0x034F, 0x17B4, 0x17B5)
        )
    ]
    assert len(printed_ignorables) >= 270
    for char in printed_ignorables:
        assert hidden_at(f"a{char}") == [1], f"U+{ord(char):04X}"
