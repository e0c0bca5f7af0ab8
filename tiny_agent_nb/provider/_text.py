"""What the model and the server wrote, made fit to store and to quote.

Model text may hold lone surrogate escapes (`"\\ud800"`: valid JSON, not valid UTF-8);
`words.clean_unicode` makes it writable. Tool-call arguments that are not a JSON object, or nest
deeper than the session file allows (`MAX_JSON_DEPTH`), never raise: the call keeps
`arguments={}` and `invalidArguments=<what was sent>` (cut to `INVALID_ARGUMENTS_LIMIT`
characters) so the loop can answer the model with an error and the entry still commits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..session import MAX_JSON_DEPTH, json_depth, json_value_problem
from ..words import clean_unicode, shorten

MESSAGE_LIMIT = 500  # characters of a server's error message quoted in ours
# Characters of unusable arguments kept in the session file: enough to see what went
# wrong, while a model's broken 10 MB write_file call does not land in every later read.
INVALID_ARGUMENTS_LIMIT = 16 * 1024

# ---------------------------------------------------------------- tool-call arguments


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # NaN / Infinity: valid Python, not JSON, not canonical


def _clean_value(value: Any) -> Any:
    """`value` with every string made valid UTF-8; only called on values no deeper than
    MAX_JSON_DEPTH, so the recursion is bounded."""
    if isinstance(value, str):
        return clean_unicode(value)
    if isinstance(value, dict):
        return {clean_unicode(k): _clean_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_value(v) for v in value]
    return value


def encoded(value: object) -> str:
    """JSON text of a value a server sent already decoded; `repr` where JSON cannot say it
    (nested past the encoder's recursion limit)."""
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        return shorten(repr(value)[:INVALID_ARGUMENTS_LIMIT], INVALID_ARGUMENTS_LIMIT)


def _kept(text: str) -> str:
    """Unusable arguments as kept in `invalidArguments`: cut, saying how much there was."""
    if len(text) <= INVALID_ARGUMENTS_LIMIT:
        return text
    return text[:INVALID_ARGUMENTS_LIMIT] + f"… [cut: {len(text)} characters in all]"


def parse_arguments(raw: object) -> tuple[dict[str, Any], str | None]:
    """`(arguments, invalidArguments)`: a JSON object, or `{}` and the raw text kept. A
    server that sends the object itself is read as its JSON text."""
    if raw is None:
        return {}, None
    text = clean_unicode(raw if isinstance(raw, str) else encoded(raw))
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return {}, _kept(text)
    # What the session file may not hold (too deep, 1e400 read as infinity, an integer of
    # thousands of digits): the store would refuse the entry, so the model is told
    # instead (and its answer can still be committed).
    if not isinstance(value, dict) or json_depth(value) > MAX_JSON_DEPTH:
        return {}, _kept(text)
    kept = _clean_value(value)
    if json_value_problem(kept) is not None:
        return {}, _kept(text)
    return kept, None


def get_path(obj: object, *path: str) -> object:
    """`obj[path[0]][path[1]]...` of a parsed JSON body; None where a level is missing
    or is no object (servers leave out, or null, whatever they do not report)."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def parsed(raw: bytes) -> object:
    """A body's JSON value; None when it is not JSON (or nests deeper than the decoder)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None
