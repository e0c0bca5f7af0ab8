"""The small words every layer says the same way (docs/glossary.md): money, tokens and
usage, shortened text, a tool's label, printable and valid text, a compaction.

The bottom layer (it imports nothing of the package), so every layer and surface says
these alike. Words about a session's facts are the timeline's; escaping for a renderer
is `render`'s and `safe_markdown`'s.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

PREVIEW = 160  # characters of a prompt, argument summary or result preview
BUILTIN = "builtin"  # the source of the package's own tools: not shown
NO_USAGE = "no usage reported"

# ---------------------------------------------------------------- money and tokens


def usd(cost: float) -> str:
    """Dollars with at least two decimals and up to six: sub-cent costs are common."""
    whole, _, frac = f"{cost:.6f}".rstrip("0").partition(".")
    return f"${whole}.{frac:0<2}"


def money(cost: float | None, unpriced: int = 0) -> str:
    """A cost, on every surface: `$0.002`; `at least $0.002` when some usage reported no
    cost (`unpriced`); `unknown` when none did, never `$0` for a cost nobody reported."""
    if cost is None:
        return "unknown"
    return f"at least {usd(cost)}" if unpriced else usd(cost)


def tokens(input_tokens: int, output_tokens: int, cost: float | None, unpriced: int) -> str:
    """`12 in / 3 out`, or `usage unknown` when nothing reported any (never `0 in / 0 out`
    for a usage nobody reported)."""
    if cost is None and unpriced and not (input_tokens or output_tokens):
        return "usage unknown"
    return f"{input_tokens} in / {output_tokens} out"


def usage(
    input_tokens: int, output_tokens: int, cost: float | None, unpriced: int, records: int
) -> str:
    """A ledger's tokens and cost: `200 in / 20 out · cost $0.002`; `no usage reported`
    for one with no usage fact (`records`) and no answer that reported none (a run whose
    every request failed)."""
    if not records and not unpriced:
        return NO_USAGE
    return f"{tokens(input_tokens, output_tokens, cost, unpriced)} · cost {money(cost, unpriced)}"


# ---------------------------------------------------------------- shortened text


def shorten(text: str, limit: int = PREVIEW) -> str:
    """`text` on one line (whitespace runs made one space), at most `limit` characters,
    the cut marked `…`: a preview, or a server's message quoted in ours."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def whole_sentences(text: str, limit: int) -> str:
    """`text` on one line, at most `limit` characters: cut after its last sentence that
    fits, else after its last word that fits, and then marked `…`; never mid-sentence
    without a mark ("... is a required property. The tool")."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    ends = [m.end() for m in re.finditer(r"[.!?](?= )", text[: limit - 1])]
    cut = ends[-1] if ends else text.rfind(" ", 0, limit - 1)
    return text[: cut if cut > 0 else limit - 2] + " …"


_FENCE = ("```", "~~~")


def first_line(text: str, limit: int = PREVIEW) -> str:
    """What a run line shows of its prompt: the first line with words (a code fence's
    delimiters have none), `…` when more of the prompt follows."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    shown = next((line for line in lines if not line.startswith(_FENCE)), "")
    line = shorten(shown, limit)
    more = len(lines) > 1 and not line.endswith("…")
    return f"{line} …" if more else line


def cap(text: str, limit: int) -> str:
    """Cut without reflowing (for JSON and outputs shown in full in a details pane)."""
    return (
        text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"
    )


def byte_size(n: int) -> str:
    """`70 B`, `2.5 KB`, `32 MB` (a KB is 1024 bytes): a size on every surface."""
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{round(n / scale, 1):g} {unit}"
    return f"{n} B"


def shown_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as a person reads them: a writing call's "file" member (digests,
    docs/spec.md §16) as whether a rewind can put the file back."""
    change = arguments.get("file")
    if not isinstance(change, dict):
        return dict(arguments)
    shown = {k: v for k, v in arguments.items() if k != "file"}
    if change.get("kept") is True:
        shown["history"] = "kept: a rewind can restore the file"
    else:
        shown["history"] = f"not kept ({change.get('why') or 'unknown'}): no rewind restores it"
    return shown


def short_arguments(arguments: Mapping[str, Any], limit: int = 80) -> str:
    """`command='ls -la'`-style summary: what a user recognises at a glance."""
    parts = [
        f"{k}={json.dumps(v, ensure_ascii=False)}"
        for k, v in arguments.items()
        if v is not None and k != "file"  # a writing call's digests: no one reads them
    ]
    return shorten(", ".join(parts), limit)


# ---------------------------------------------------------------- tools


def tool_label(name: str, source: str) -> str:
    """A tool call's name (as the model called it), and its source unless built in:
    `time__get_current_time · mcp:time`."""
    return name if source == BUILTIN else f"{name} · {source}"


# ---------------------------------------------------------------- text


# Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties.txt) is
# Other_Default_Ignorable_Code_Point + Cf + Variation_Selector, less White_Space and a few
# Cf that show. Cf, whitespace and unassigned code points are not `isprintable()`; these
# are the rest, the ranges of PropList.txt whose characters Python prints as themselves
# and no reader sees (Python accepts most in a name: `dry_run\u034f` is not `dry_run`).
_IGNORABLE = (
    (0x034F, 0x034F),  # Other_DI: COMBINING GRAPHEME JOINER
    (0x115F, 0x1160),  # Other_DI: HANGUL CHOSEONG FILLER, HANGUL JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # Other_DI: KHMER VOWEL INHERENT AQ, AA
    (0x180B, 0x180D),  # Variation_Selector: MONGOLIAN FREE VARIATION SELECTOR ONE..THREE
    (0x180F, 0x180F),  # Variation_Selector: MONGOLIAN FREE VARIATION SELECTOR FOUR
    (0x3164, 0x3164),  # Other_DI: HANGUL FILLER
    (0xFE00, 0xFE0F),  # Variation_Selector: VARIATION SELECTOR-1..16
    (0xFFA0, 0xFFA0),  # Other_DI: HALFWIDTH HANGUL FILLER
    (0xE0100, 0xE01EF),  # Variation_Selector: VARIATION SELECTOR-17..256
)
_PRESENTATION = ("\ufe0e", "\ufe0f")  # text or emoji style: one, after a symbol, shows
_MARKS = ("Mn", "Me")  # drawn on the character before them, taking no room of their own
MAX_MARKS = 4  # on one character (Vietnamese, Hebrew or Tibetan need 2-4): more pile
# up over the lines around it


def hidden_at(text: str) -> list[int]:
    """The indexes of the characters of `text` a reader does not see as themselves, so
    none may pass unescaped where a person reviews text: what `isprintable()` refuses
    (controls, bidi overrides, zero-width characters, every space but U+0020); Unicode's
    default-ignorable characters (`_IGNORABLE`) but one presentation selector right after
    a symbol; characters named a blank or a filler (U+2800 BRAILLE PATTERN BLANK); and
    marks on no visible character (after a space, a hidden one or nothing) or past
    `MAX_MARKS` on one."""
    found: list[int] = []
    carrier = ""  # the category of the character a mark would go on ("": none shown)
    marks = 0
    for index, char in enumerate(text):
        category, hidden = _character(char)
        marks = marks + 1 if category in _MARKS else 0
        if hidden and char in _PRESENTATION:
            hidden = not (carrier == "So" and marks == 1)
        if hidden or (marks and (not carrier or marks > MAX_MARKS)):
            found.append(index)
            carrier = ""
        elif not marks:
            carrier = "" if char.isspace() else category
    return found


@functools.lru_cache(maxsize=4096)  # text repeats its characters: looked up once each
def _character(char: str) -> tuple[str, bool]:
    """`char`'s category, and whether it is hidden wherever it stands."""
    point = ord(char)
    return unicodedata.category(char), (
        not char.isprintable()
        or any(low <= point <= high for low, high in _IGNORABLE)
        or unicodedata.name(char, "").endswith((" BLANK", " FILLER"))
    )


def escaped(char: str) -> str:
    """`char` as Python writes it in a string: `\\r`, `\\x1b`, `\\u034f`, `\\U000e0041`."""
    if not char.isprintable():
        return repr(char)[1:-1]
    point = ord(char)  # printable, yet hidden: repr would write it as it is
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def printable(
    text: str, *, keep_lines: bool = False, escape: Callable[[str], str] = escaped
) -> str:
    """Untrusted text for a terminal or a review: every character a reader would not see
    as itself (`hidden_at`) written as its escape, so none can drive the terminal (ESC,
    CSI `\x9b`, DEL) or hide what is shown (a `\r`, U+202E, U+034F, blanks, marks).

    `keep_lines` keeps line breaks (`\n`) and tabs, for text read as a whole (an answer,
    a command to approve). A `\r` before a `\n` is shown too: bash reads `cd build\r` as
    a directory that is not there, so an approved `cd build` then `rm -rf *` would run
    where the user did not read. `escape`: how a hidden character is written."""
    if text.isascii() and text.isprintable():
        return text
    kept = "\n\t" if keep_lines else ""
    chars = list(text)
    for index in hidden_at(text):
        if chars[index] not in kept:
            chars[index] = escape(chars[index])
    return "".join(chars)


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_unicode(text: str) -> str:
    """`text` encodable as UTF-8, so it can be committed: surrogate pairs escaped apart
    (`"\\ud83d"` in one chunk of a stream, `"\\ude00"` in the next, or a file name that is
    not UTF-8) joined, lone halves made U+FFFD."""
    if not _SURROGATE.search(text):
        return text
    # Through UTF-16, a high+low pair becomes the character it encodes (what a JSON
    # "\\ud83d\\ude00" means); what is left alone decodes to the replacement character.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


# ---------------------------------------------------------------- compaction


def summary_tokens(summary: str) -> int:
    """A summary's size in tokens, as every surface says it: its UTF-8 bytes / 4, the
    estimate a request's size starts from."""
    return (len(summary.encode("utf-8", "surrogatepass")) + 3) // 4


def compaction_words(
    entries: int, summary_size: int, tokens_before: int | None, tokens_after: int | None
) -> str:
    """One compaction, on every surface: `compacted 12 entries into a summary of ~40
    tokens: context ~191 → ~64 tokens` (`~`: estimates; `summary_size`: `summary_tokens`)."""
    what = f"{entries} entries" if entries else "the earlier summary alone (too large)"
    words = f"compacted {what} into a summary of ~{summary_size} tokens"
    if tokens_before is not None and tokens_after is not None:
        return f"{words}: context ~{tokens_before} → ~{tokens_after} tokens"
    if tokens_before is not None:  # written before compactions recorded the size after
        return f"{words}: context ~{tokens_before} tokens before"
    return words
