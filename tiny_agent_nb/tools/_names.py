"""File names shown to the model: one entry per line, every name told apart.

A file name may hold a newline (one entry would look like two), terminal controls, or
bytes that are not UTF-8 (a lossy decode makes different names the same). They are shown
escaped, Python-style, and a path given back in that form is read as the real name:

    \\\\  a backslash          \\n \\t \\r  those controls
    \\xHH  the one byte HH (a raw byte that is not UTF-8, or an ASCII control)
    \\uHHHH, \\UHHHHHHHH  a character that is not printable (a bidi override, U+2028 ...)

Any other backslash is kept. An escape is read only where `printable_path` would have
written it: `\\x2f` or `\\u002e` stay as written, else a path approved as
`notes\\x2f..\\x2f\\x2egit` would be written to `.git`: the user must see what is used.
"""

from __future__ import annotations

import re

_NAMED = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNNAMED = {v[1]: k for k, v in _NAMED.items()}
# os.fsdecode maps each byte that is not UTF-8 to one of these lone surrogates.
_RAW_BYTES = range(0xDC80, 0xDD00)
_ESCAPE = re.compile(r"\\(?:([\\ntr])|x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8}))")


def printable_path(name: str) -> str:
    """`name` (as os.fsdecode gives it) with every character that is not plainly
    printable escaped; the inverse of `unescape_path`."""
    if name.isprintable() and "\\" not in name:
        return name
    return "".join(_escape(c) for c in name)


def _escape(c: str) -> str:
    if c in _NAMED:
        return _NAMED[c]
    code = ord(c)
    if code in _RAW_BYTES:
        return f"\\x{code - 0xDC00:02x}"
    if c.isprintable():
        return c
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def unescape_path(path: str) -> str:
    """The name that `printable_path` showed as `path`."""
    return _ESCAPE.sub(_unescape, path)


def _unescape(match: re.Match[str]) -> str:
    named, byte, short, long = match.groups()
    if named is not None:
        return _UNNAMED[named]
    if byte is not None:
        value = int(byte, 16)
        # Above ASCII, \xHH is a raw byte: the surrogate os.fsencode turns back into it.
        c = chr(value) if value < 0x80 else chr(0xDC00 + value)
    else:
        code = int(short or long, 16)
        if code > 0x10FFFF:
            return match.group(0)
        c = chr(code)
    # A printable character is shown as itself: an escape of one is not a disguise.
    return match.group(0) if c.isprintable() else c
