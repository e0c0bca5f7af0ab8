"""File names shown to the model: one entry per line, every name told apart.

A file name is any bytes but NUL and "/": it may hold a newline (which would make one
listed entry look like two), terminal control bytes, or bytes that are not UTF-8 (which
a lossy decode would turn into the same U+FFFD for different names). `printable_path`
escapes those, Python-style, so the shown text is one line and tells every name apart;
`unescape_path` reads a path given back in that form, so a name listed by the tools can
be passed to them as shown.

    \\\\  a backslash          \\n \\t \\r  those controls
    \\xHH  the one byte HH (a raw byte that is not UTF-8, or an ASCII control)
    \\uHHHH, \\UHHHHHHHH  a character that is not printable (a bidi override, U+2028 ...)

Any other backslash is kept as it is, so a path written without escapes still works
unless it contains one of the sequences above. An escape is read only where
`printable_path` would have written it: `\\x2f` or `\\u002e` stand for a printable
character, which is never escaped, so they stay as written. Otherwise a path approved as
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
        return name  # the common case, kept fast
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
    if "\\" not in path:
        return path
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
    # Only what printable_path escapes is read back: a printable character is shown as
    # itself, so an escape of one is a name with a backslash in it, not a disguise.
    return match.group(0) if c.isprintable() else c
