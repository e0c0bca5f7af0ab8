"""Untrusted text (a model's answer) as markdown that can never become active HTML.

`safe_markdown(text)` is the one way model text meets a markdown renderer. It keeps what
markdown is for (paragraphs, emphasis, lists, tables, headings, http links, maths the
model wrote as maths) and turns everything else into visible text. Its output is markdown
*source* that JupyterLab renders with its own parsers, so a library that renders markdown
on our side cannot stand in for it.

- Raw HTML and autolinks: every `<`, `&` and `"` outside code is escaped. `"` too because
  JupyterLab puts LaTeX (`$...$`) back into the rendered HTML escaping `<`, `>` and `&`
  but not `"`: one in an image's alt text or a link ended the attribute (`onerror=`).
- Code (fences, code spans) is encoded by us as `<pre><code>` / `<code>`, every ASCII
  punctuation character a numeric entity, on one line: JupyterLab's two parsers (its
  LaTeX pre-pass protects only column-0 fences and pairs `$` across code; list items end
  fences early) disagree with CommonMark and each other about where code ends, and raw
  text left "inside code" became live HTML wherever they did. Encoded, a misjudged code
  boundary can only look wrong, never run. Backticks that open no span are escaped.
- Links and reference definitions keep http, https, mailto and relative destinations;
  any other scheme (`javascript:`, `data:`, `file:` ...) is unlinked by escaping the `(`
  or `:` that makes it one, after decoding what a renderer or browser would (backslash
  escapes, entities, percent escapes, controls and spaces); in doubt, unlinked.
- Images load by themselves (a request the user never made: a way to send data out), so
  only a simple relative one such as `![plot](plot.png)` stays an image; any other
  becomes a link by escaping its `!`.
- A `$` shows as written unless it delimits maths, by pandoc's rule: `$...$` with a
  non-space after the opening `$`, a non-space before the closing one and no digit after
  it, or `$$...$$`; neither across a blank line, around a backtick or with unbalanced
  braces ("$5 per day and we spent $3" is money, `$x^2$` maths). JupyterLab pairs `$`
  in the source and again in the page (MathJax, where a markdown escape is gone), so
  each other `$` is the entity `&#x24;` inside a span of the class MathJax skips; a bare
  entity where markup is not read (a link's destination, alt text, a definition).

A streamed prefix of an answer (an unclosed fence, a half-written link) is made safe the
same way.
"""

from __future__ import annotations

import html
import re
import string
from urllib.parse import unquote

__all__ = ["safe_markdown", "safe_text"]

_PUNCTUATION = frozenset(string.punctuation)
_OPENER = re.compile(r"(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)")
_RUN = re.compile(r"`+")
_ESCAPED = {"<": "&lt;", "&": "&amp;", '"': "&quot;"}
_DESTINATION_START = re.compile(r"\](?P<kind>[(:])")
_SAFE_SCHEMES = ("http:", "https:", "mailto:")
_WINDOW = 128  # characters of a destination looked at: a scheme ends well before
_SAFE_IMAGE = re.compile(r"!\[[^\[\]\\\n]*\]\((?!//)[A-Za-z0-9._~/%+-]+\)")
# A scheme is the run of scheme characters before `://`, from its first letter, tried
# once per run, from its start (the lookbehind): tried from every letter, a 40 KB base64
# line cost n^2 steps (7 s per render). `lead` and `scheme` both end where the run ends,
# so backtracking is one step each, linear without Python 3.11's possessive `*+`
# (bench/bench_untrusted_text.py measures it).
_TEXT_LINK = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<lead>[0-9+.-]*)(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)(?=://)"
    r"|(?<=data)(?=:)"
)
_UNLINK = "\ufeff"  # ZERO WIDTH NO-BREAK SPACE: invisible, and whitespace to JavaScript
# A `$` that is not maths. The hex entity is ours alone: code is encoded with decimal
# entities, and a model's own `&#x24;` is escaped to `&amp;#x24;`.
_DOLLAR = "&#x24;"
# Single quotes: the output holds no `"` (see above). MathJax 3 skips `mathjax_ignore`,
# MathJax 2 (classic Notebook, older nbconvert) `tex2jax_ignore`.
_SHOWN_DOLLAR = f"<span class='tex2jax_ignore mathjax_ignore'>{_DOLLAR}</span>"
# Where a `&#x24;` stays a bare entity: a link's destination and title, an image's alt
# text and a reference definition are attributes, where markup would show as text.
_NOT_MARKUP = re.compile(
    r"(\]\([^)\n]*\)?|(?<!\\)!\[[^\]\n]*\]\(|^[ \t>*+\-0-9.)]*\[[^\]\n]*\]:.*$)", re.MULTILINE
)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def safe_text(text: str) -> str:
    """Text for a Jupyter frontend's plain-text output (stream, text/plain).

    JupyterLab turns any `scheme://...` and `data:...` in text output into a link, so a
    tool argument `javascript://%0Aalert(1)` became a live javascript: link. An invisible
    character before the colon of every such scheme but http and https leaves the text
    as it reads and nothing for the link finder to match."""
    return _TEXT_LINK.sub(_unlink_scheme, text)


def _unlink_scheme(match: re.Match[str]) -> str:
    scheme = match["scheme"]
    if scheme is None:
        return _UNLINK  # the empty match between `data` and `:`
    kept = match["lead"] + scheme
    return kept if scheme.lower() in ("http", "https") else kept + _UNLINK


def safe_markdown(text: str) -> str:
    """`text` as markdown whose only HTML is our own inert `<pre>`/`<code>`."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        opener = _opener(lines[i])
        if opener is None:
            prose.append(lines[i])
            i += 1
            continue
        if prose:
            out.append(_prose("\n".join(prose)))
            prose = []
        indent, fence = opener
        body: list[str] = []
        i += 1
        while i < len(lines):
            line = lines[i]
            if _closes(line, fence, indent):
                i += 1
                break
            if line.strip() and _indent(line) < indent:
                break  # a less indented line ends the list item the fence sits in
            body.append(line[min(indent, _indent(line)) :])
            i += 1
        out.append(" " * indent + "<pre><code>" + _encode("\n".join(body)) + "</code></pre>")
    if prose:
        out.append(_prose("\n".join(prose)))
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _opener(line: str) -> tuple[int, str] | None:
    match = _OPENER.fullmatch(line)
    if match is None:
        return None
    if match["fence"][0] == "`" and "`" in match["info"]:
        return None  # CommonMark: not a fence, a code span
    return len(match["indent"]), match["fence"]


def _closes(line: str, fence: str, indent: int) -> bool:
    stripped = line.strip(" \t")
    run = len(stripped) - len(stripped.lstrip(fence[0]))
    return run >= len(fence) and run == len(stripped) and _indent(line) <= indent + 3


def _encode(code: str) -> str:
    """Code as HTML text no markdown parser, LaTeX pre-pass or browser reads as markup."""
    return "".join(f"&#{ord(c)};" if c in _PUNCTUATION or c == "\n" else c for c in code)


def _prose(text: str) -> str:
    return _show_dollars(_unlink(_escape_inline(text)))


def _escape_inline(text: str) -> str:
    """Escape `<`, `&` and `"`, encode code spans (one line each), escape stray backticks."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in _PUNCTUATION:
            # A backslash escape stays what it is, but `\<`, `\&` and `\"` become the
            # entities that show the same, so none of the model's is left at all; `\$`
            # (a dollar the model meant as one) is shown as written, like any other.
            escaped = text[i + 1]
            out.append(_DOLLAR if escaped == "$" else _ESCAPED.get(escaped, text[i : i + 2]))
            i += 2
        elif c == "$":
            end = _maths_end(text, i)
            if end is None:
                out.append(_DOLLAR)
                i += 1
            else:  # the model's maths, as written (but still inert: `<`, `&`, `"` escaped)
                out.append("".join(_ESCAPED.get(m, m) for m in text[i:end]))
                i = end
        elif c == "`":
            run = _RUN.match(text, i)
            assert run is not None
            end = _closing_run(text, run.end(), len(run.group()))
            if end is None:
                out.append("\\`" * len(run.group()))
                i = run.end()
            else:
                out.append("<code>" + _encode(_span_content(text[run.end() : end])) + "</code>")
                i = end + len(run.group())
        elif c in _ESCAPED:
            out.append(_ESCAPED[c])
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _maths_end(text: str, start: int) -> int | None:
    """Where the maths opened by the `$` at `start` ends, or None when that `$` is not
    maths (pandoc's rule for `$` delimiters; see the module's docstring)."""
    if text.startswith("$$", start):
        close = text.find("$$", start + 2)
        end = close + 2
        body = text[start + 2 : close]
        if close < 0 or not body.strip():
            return None
    else:
        close = start + 1
        if close >= len(text) or text[close].isspace():
            return None
        while (close := text.find("$", close)) >= 0 and _escaped(text, close):
            close += 1
        end = close + 1
        body = text[start + 1 : close]
        if close < 0 or text[close - 1].isspace() or text[end : end + 1].isdigit():
            return None
    if "`" in body or _BLANK_LINE.search(body) or not _balanced(body):
        return None
    return end


def _balanced(tex: str) -> bool:
    """Braces balance (`\\{` and `\\}` are characters): JupyterLab's pre-pass does not
    end maths inside an open brace, and would pair this `$` with a later one."""
    depth = 0
    for i, c in enumerate(tex):
        if c in "{}" and not _escaped(tex, i):
            depth += 1 if c == "{" else -1
            if depth < 0:
                return False
    return depth == 0


def _show_dollars(text: str) -> str:
    """Each `$` that is not maths, in the span MathJax skips, where markup is read."""
    parts = _NOT_MARKUP.split(text)  # markup read, not read, read, ...
    return "".join(p if i % 2 else p.replace(_DOLLAR, _SHOWN_DOLLAR) for i, p in enumerate(parts))


def _closing_run(text: str, start: int, length: int) -> int | None:
    """Where the next backtick run of exactly `length` on the same line starts."""
    line_end = text.find("\n", start)
    line_end = len(text) if line_end < 0 else line_end
    for run in _RUN.finditer(text, start, line_end):
        if len(run.group()) == length:
            return run.start()
    return None


def _span_content(content: str) -> str:
    """CommonMark: one space is stripped from each side when both are there."""
    if len(content) > 1 and content[0] == " " and content[-1] == " " and content.strip(" "):
        return content[1:-1]
    return content


def _unlink(text: str) -> str:
    """Escape `](` and `]:` before unsafe destinations, and `!` before unsafe images."""
    unsafe = _DESTINATION_START.finditer(text)
    text = _backslash(
        text, [m.start("kind") for m in unsafe if not _safe_destination(text, m.end())]
    )
    images = [m.start() for m in re.finditer(r"!\[", text)]
    return _backslash(
        text, [i for i in images if not _escaped(text, i) and not _SAFE_IMAGE.match(text, i)]
    )


def _backslash(text: str, positions: list[int]) -> str:
    """`text` with a backslash before each of `positions` (in order)."""
    out: list[str] = []
    last = 0
    for at in positions:
        out.append(text[last:at] + "\\")
        last = at
    out.append(text[last:])
    return "".join(out)


def _escaped(text: str, index: int) -> bool:
    """Is text[index] escaped: preceded by an odd number of backslashes?"""
    start = index
    while start > 0 and text[start - 1] == "\\":
        start -= 1
    return (index - start) % 2 == 1


def _safe_destination(text: str, start: int) -> bool:
    """Does the destination at `start` (after `](` or `]:`) have a safe scheme or none?

    Decodes what any renderer or browser might before it reads a scheme, and removes
    every character a browser strips or a renderer wraps around a destination, so
    `java&#x09;script:`, `<javascript:...>` and `JAVA\\nSCRIPT:` all count as javascript."""
    while start < len(text) and text[start].isspace():
        start += 1
    window = text[start : start + _WINDOW]
    close = window.find(")")
    if close >= 0:
        window = window[:close]
    if not any(c in window for c in ":&%"):
        return True  # nothing in it is, or decodes to, the colon that ends a scheme
    decoded = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", window)
    decoded = unquote(html.unescape(unquote(html.unescape(decoded))))
    decoded = "".join(c for c in decoded if c > " " and c not in "<>`\\")
    if decoded.lower().startswith(_SAFE_SCHEMES):
        return True
    first = re.split(r"[/?#]", decoded, maxsplit=1)[0]
    return ":" not in first
