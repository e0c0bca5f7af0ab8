"""Filling a `%%agent` prompt from the notebook's variables.

The rules, all of them (shown by `%agent help` and the README):

- `{name}`, `{name.attr}`, `{name[key]}` (chained as in `str.format`: `{cfg.paths[0]}`)
  become the value's `str()` when `name` is a variable of the notebook;
- `{{name}}` (the same forms, doubled) becomes `{name}`, unfilled: the one escape;
- nothing else changes: an unknown name, `${name}` (shell), other braces (JSON, dicts,
  `{{` not around a name), and everything inside code fences (```` ``` ````/`~~~`) and
  code spans (`` `...` ``), which are the prompt's code and reach the model verbatim.

A name that exists but whose attribute or key does not is an error (`PromptError`),
not a silent hole in the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .._exceptions import TinyAgentError

_FIELD = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[[^\[\]{}`\n]+\])*"
# `$` before a brace is the shell's `${x}`; a field touching another brace (`{{x}`,
# `{x}}}`) is none: only braces exactly around a name count.
_PLACE = re.compile(
    rf"(?<![${{])(?:\{{\{{(?P<escaped>{_FIELD})\}}\}}|\{{(?P<field>{_FIELD})\}})(?!\}})"
)
_PART = re.compile(r"\.(?P<attr>[A-Za-z_]\w*)|\[(?P<key>[^\]]+)\]")
_FENCE = re.compile(r"^ {0,3}(?P<mark>`{3,}|~{3,})")
_SPAN = re.compile(r"(?<!`)(?P<ticks>`+)(?!`).*?(?<!`)(?P=ticks)(?!`)", re.DOTALL)


class PromptError(TinyAgentError, ValueError):
    """A `{name...}` field names a variable but not something it holds."""


def fill_prompt(text: str, namespace: Mapping[str, Any]) -> str:
    """`text` with its fields filled from `namespace` (see the module's rules)."""
    return "".join(
        piece if is_code else _fill_prose(piece, namespace)
        for piece, is_code in _code_and_prose(text)
    )


def _code_and_prose(text: str) -> list[tuple[str, bool]]:
    """`text` cut into (piece, is_code): fenced blocks and code spans are code."""
    pieces: list[tuple[str, bool]] = []
    prose: list[str] = []
    fence: str | None = None
    block: list[str] = []
    for line in text.splitlines(keepends=True):
        found = _FENCE.match(line)
        if fence is None:
            if found is not None and not (found["mark"][0] == "`" and "`" in line[found.end() :]):
                fence = found["mark"]
                pieces += _spans("".join(prose))
                prose, block = [], [line]
            else:
                prose.append(line)
        else:
            block.append(line)
            if found is not None and _closes(fence, found["mark"], line[found.end() :]):
                pieces.append(("".join(block), True))
                fence, block = None, []
    pieces += _spans("".join(prose))
    if block:  # a fence never closed runs to the end, as in Markdown
        pieces.append(("".join(block), True))
    return pieces


def _closes(fence: str, mark: str, rest: str) -> bool:
    """A closing fence: the opening's character, at least as long, nothing after it."""
    return mark[0] == fence[0] and len(mark) >= len(fence) and not rest.strip()


def _spans(prose: str) -> list[tuple[str, bool]]:
    pieces: list[tuple[str, bool]] = []
    start = 0
    for span in _SPAN.finditer(prose):
        pieces += [(prose[start : span.start()], False), (span.group(0), True)]
        start = span.end()
    pieces.append((prose[start:], False))
    return pieces


def _fill_prose(text: str, namespace: Mapping[str, Any]) -> str:
    def fill(match: re.Match[str]) -> str:
        escaped = match["escaped"]
        if escaped is not None:
            return "{" + escaped + "}"
        field = match["field"]
        name = re.match(r"[A-Za-z_]\w*", field)
        assert name is not None
        if name.group(0) not in namespace:
            return match.group(0)
        return str(_lookup(field, name.end(), namespace[name.group(0)]))

    return _PLACE.sub(fill, text)


def _lookup(field: str, start: int, value: Any) -> Any:
    for part in _PART.finditer(field, start):
        try:
            if part["attr"] is not None:
                value = getattr(value, part["attr"])
            else:
                key = part["key"]
                value = value[int(key) if key.isdigit() else key]
        except Exception as exc:
            raise PromptError(
                f"{{{field}}} in the prompt: {field[: part.end()]} fails "
                f"({type(exc).__name__}: {exc}); nothing was sent. Write {{{{{field}}}}} "
                "to keep the braces as text."
            ) from None
    return value
