"""Secrets: which values are secret, and the one way every text is cleared of them.

A secret is a value that grants access: the API key, the credentials of a URL, the header
values and the credential-named env values of an MCP server, a value the user marks. It
goes where it is needed (a request's header, a server's environment) and nowhere else:
every text that reaches the session file, the model, the screen or the saved notebook
first goes through `redact(text, secrets)`, whoever made it (a tool, the model, a server,
an error); `redact_json` for a JSON value, `StreamRedactor` for a text that arrives in
pieces. What is a secret, and how a URL or a command line is shown without one, live here
too, so that the provider, the tools, the MCP servers and the notebook agree.
"""

from __future__ import annotations

import base64
import itertools
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import unquote, unquote_plus

__all__ = [
    "MASK",
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "StreamRedactor",
    "argument_secrets",
    "hidden_secrets",
    "is_secret_name",
    "mask_credentials",
    "redact",
    "redact_json",
    "redact_url",
    "secrets_of",
    "url_secrets",
]

REDACTED = "[redacted]"  # what a secret becomes in a text
MASK = "****"  # what a credential becomes where a configuration is shown (a URL, a value)
# Shorter "secrets" (a 4-letter URL password, a user name) occur in ordinary text far too
# often: hiding them would mangle outputs (and dropping env variables holding them would
# drop PATH) while protecting little. Real API keys are dozens of characters long.
MIN_SECRET_LENGTH = 8

# Where a text was cut, a secret may be cut too: its beginning before the cut, its end
# after it. Cut marks open with "[..." and close with "]" (truncate's elision note, the
# " [...]" that ends a line grep shortened), or are one "…" (a quote an error shortened).
# A piece of this length next to one is hidden (a shorter one tells next to nothing).
_MIN_PIECE = 4
# No leading or trailing \s*: on a long run of spaces that backtracks quadratically (this
# runs on every tool's output); the bound keeps "[...[...[..." linear. "…" is looked for
# apart: an alternation of the two in one pattern made every scan 20 times slower.
_CUT_MARK = re.compile(r"\[\.\.\.[^\]\n]{0,80}\]")
# The beginning of a cut mark at the very end of a text that is still arriving.
_OPEN_MARK = re.compile(r"\[(?:\.(?:\.(?:\.[^\]\n]{0,80})?)?)?\Z")
# A piece this long is hidden wherever it is: a cut this module does not know of.
_MIN_STRAY_PIECE = 12


def hidden_secrets(secrets: Iterable[str]) -> tuple[str, ...]:
    """The secrets worth hiding, longest first (so a secret containing another is hidden
    whole rather than leaving its remainder)."""
    kept = {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}
    return tuple(sorted(kept, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of a secret replaced by REDACTED, and so are the long
    pieces of one, and the pieces a cut in the text left of one."""
    hidden = hidden_secrets(secrets)
    return _redact(text, hidden) if hidden else text


def redact_json(value: Any, secrets: Iterable[str]) -> Any:
    """A copy of the JSON `value` with every string (keys too) redacted; the same value
    when there was nothing to redact."""
    hidden = hidden_secrets(secrets)
    return _redact_json(value, hidden) if hidden else value


def _redact_json(value: Any, hidden: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return _redact(value, hidden)
    if isinstance(value, dict):
        return {_redact(k, hidden): _redact_json(v, hidden) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_json(v, hidden) for v in value]
    return value


def _redact(text: str, hidden: tuple[str, ...]) -> str:
    return _render(text, _spans(text, hidden))


def _spans(text: str, secrets: tuple[str, ...]) -> list[tuple[int, int]]:
    """Where `text` shows a secret: each occurrence of one, of a piece of at least
    _MIN_STRAY_PIECE characters of its beginning or end, and of a piece of at least
    _MIN_PIECE next to a cut mark (its beginning before the mark, its end after it).
    Every occurrence counts (not the first of overlapping ones): so a text that grows
    keeps every span it had, which is what lets a stream be shown as it comes."""
    spans: list[tuple[int, int]] = []
    for secret in secrets:
        spans += _pieces(text, secret)
    # The text between cut marks, in parts: [part, mark, part, mark, ..., part].
    bounds = [0, *(i for mark in _cut_marks(text) for i in mark), len(text)]
    parts = list(zip(bounds[::2], bounds[1::2], strict=True))
    for (head_start, head_end), (tail_start, tail_end) in itertools.pairwise(parts):
        body_end = head_start + len(text[head_start:head_end].rstrip())
        body_start = tail_end - len(text[tail_start:tail_end].lstrip())
        for secret in secrets:
            for size in range(len(secret) - 1, _MIN_PIECE - 1, -1):
                if text.endswith(secret[:size], head_start, body_end):
                    spans.append((body_end - size, body_end))
                    break
            for size in range(len(secret) - 1, _MIN_PIECE - 1, -1):
                if text.startswith(secret[len(secret) - size :], body_start, tail_end):
                    spans.append((body_start, body_start + size))
                    break
    return spans


def _cut_marks(text: str) -> list[tuple[int, int]]:
    """The spans of the cut marks in `text`, in order, none inside another."""
    marks = [m.span() for m in _CUT_MARK.finditer(text)]
    marks += [m.span() for m in re.finditer("…", text)]
    out: list[tuple[int, int]] = []
    for start, end in sorted(marks):
        if not out or start >= out[-1][1]:  # a "…" inside "[... …]" is part of that mark
            out.append((start, end))
    return out


def _pieces(text: str, secret: str) -> list[tuple[int, int]]:
    """The spans of `secret` in `text`, and of its long beginnings and ends."""
    found: list[tuple[int, int]] = []
    size = len(secret)
    anchor = min(size, _MIN_STRAY_PIECE)
    # os.path.commonprefix compares strings character by character (not as paths): how
    # far the text goes on as the secret does, in C.
    head, tail = secret[:anchor], secret[size - anchor :]
    at = text.find(head)
    while at >= 0:  # a beginning, as long as it goes on as the secret does
        length = len(os.path.commonprefix([text[at : at + size], secret]))  # noqa: RUF071
        found.append((at, at + length))
        at = text.find(head, at + 1)
    if size > anchor:
        backwards = secret[::-1]
        at = text.find(tail)
        while at >= 0:  # an end, as far back as it is the secret's
            end = at + anchor
            before = text[max(end - size, 0) : end][::-1]
            length = len(os.path.commonprefix([before, backwards]))  # noqa: RUF071
            found.append((end - length, end))
            at = text.find(tail, at + 1)
    return found


def _render(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each span shown as REDACTED; overlapping spans are one."""
    out: list[str] = []
    shown = 0  # text[:shown] is in `out`
    for start, end in sorted(spans):
        if end <= shown:
            continue  # inside the span before
        if start < shown:  # overlaps the span before: it goes on
            shown = end
            continue
        out += [text[shown:start], REDACTED]
        shown = end
    out.append(text[shown:])
    return "".join(out)


class StreamRedactor:
    """A text that arrives in pieces (the model's streamed answer), as it may be shown
    before it is complete.

    Showing `redact(text so far)` would not do: a secret split across two pieces shows
    its first half, unrecognised, until the second arrives. `shown()` holds back the end
    of the text that may still turn out to be (part of) a secret or to stand before a cut
    mark, so that every text it returns is the beginning of what `final()` returns: what
    one update shows, no later update takes back.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self._hidden = hidden_secrets(secrets)
        self._text = ""

    @property
    def text(self) -> str:
        """Everything fed so far, as it came (not to be shown)."""
        return self._text

    def feed(self, piece: str) -> None:
        self._text += piece

    def shown(self) -> str:
        """What may be shown of the text so far."""
        text, hidden = self._text, self._hidden
        if not hidden:
            return text
        settled = _settled(text, hidden)
        spans = _spans(text, hidden)
        # A span of the text so far that goes past `settled` is shown whole or not at all.
        while crossing := [start for start, end in spans if start < settled < end]:
            settled = min(crossing)
        return _render(text[:settled], [span for span in spans if span[1] <= settled])

    def final(self) -> str:
        """The whole text, complete: every secret in it redacted."""
        return _redact(self._text, self._hidden) if self._hidden else self._text


def _settled(text: str, secrets: tuple[str, ...]) -> int:
    """How far the spans of `text` are those of every text that begins with it: a span
    that more text would add begins with an end of `text` that is a piece of a secret
    (after spaces, before a cut mark that may still be coming)."""
    body = text.rstrip()  # a cut mark after spaces hides the secret's beginning before them
    start = len(body)
    open_mark = _OPEN_MARK.search(body)
    if open_mark is not None:  # "[..." that a "]" may still close
        start = open_mark.start()
        body = body[:start].rstrip()
    for secret in secrets:
        for size in range(min(len(secret), len(body)), 0, -1):
            if body[len(body) - size :] in secret:
                start = min(start, len(body) - size)
                break
    return start


# ---------------------------------------------------------------- what is a secret

# Names (of a query parameter, an env variable, a command-line flag) whose value is a
# credential, compared lower-cased without "-" and "_".
_SECRET_NAME = re.compile(
    r"key|token|secret|passw|credential|auth|cookie|dsn$|^(sig|signature|pwd|pass)$"
)
_AUTHORITY = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.\-]*:)?//)?([^/?#]*)")
# A URL inside a longer text (a command line's argument, an env value): up to a space.
# The scheme starts where no scheme character precedes it and is at most 32 long: tried at
# every position, an unbounded one would backtrack quadratically over a long word.
_URL_IN_TEXT = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s\"'<>]*")


def is_secret_name(name: str) -> bool:
    """Whether a value named `name` (`OPENAI_API_KEY`, `GITHUB_TOKEN`, `DB_PASSWORD`,
    `x-api-key`, `--auth-token`, a URL's `?sig=`) is a credential by its name."""
    # A name is a few words long; a flag of megabytes is not searched through.
    name = unquote(name[:256]).lower().replace("-", "").replace("_", "")
    return bool(_SECRET_NAME.search(name))


def _split(url: str) -> tuple[str, str, str, str | None, str]:
    """(scheme "//", userinfo, host and path, query, fragment) without parsing strictly:
    a URL httpx refuses must still be shown without its password."""
    match = _AUTHORITY.match(url)
    assert match is not None  # every group is optional
    head, authority = match.group(1) or "", match.group(2)
    userinfo, at, host = authority.rpartition("@")
    rest = url[match.end() :]
    rest, hash_, fragment = rest.partition("#")
    path, question, query = rest.partition("?")
    return head, userinfo if at else "", host + path, query if question else None, hash_ + fragment


def redact_url(url: str) -> str:
    """`url` with its user-info and the values of credential-named query parameters
    replaced by `****` (so it still shows that credentials are there, not what they are)."""
    head, userinfo, rest, query, fragment = _split(url)
    if userinfo:
        head += MASK + "@"
    if query is not None:
        params = []
        for param in re.split(r"([&;])", query):
            name, eq, value = param.partition("=")
            params.append(f"{name}={MASK}" if eq and value and is_secret_name(name) else param)
        rest += "?" + "".join(params)
    return head + rest + fragment


def url_secrets(url: str) -> tuple[str, ...]:
    """The credentials `url` holds, for scrubbing them from any text that may echo them (a
    server's error, a library's message, a tool's output): the user-info's user and
    password (a token is often the user, with a dummy password), the values of
    credential-named query parameters (split on `&` and `;`), each as written and
    percent-decoded, and the `Basic` token the user-info is sent as."""
    _, userinfo, _, query, _ = _split(url)
    found = list(userinfo.split(":", 1)) if userinfo else []
    if userinfo:
        user, _, password = (unquote(part) for part in userinfo.partition(":"))
        found.append(base64.b64encode(f"{user}:{password}".encode()).decode("ascii"))
    for param in re.split(r"[&;]", query or ""):
        name, eq, value = param.partition("=")
        if eq and is_secret_name(name):
            found.append(value)
    out = {piece for value in found for piece in (value, unquote(value), unquote_plus(value))}
    return tuple(sorted((s for s in out if s), key=len, reverse=True))


def secrets_of(value: str, *, whole: bool) -> tuple[str, ...]:
    """The secrets in a configured value: with `whole` (a header value, a credential-named
    env value, one the user marked) the value itself and each word after its first (the
    token of `Bearer TOKEN`); and in any case the credentials of a URL inside it
    (`postgres://user:pw@host/db`)."""
    words = value.split()
    found = [value, *words[1:]] if whole else []
    found += [s for url in _URL_IN_TEXT.findall(value) for s in url_secrets(url)]
    return tuple(s for s in dict.fromkeys(found) if s)


def mask_credentials(args: Sequence[str]) -> list[str]:
    """A command line as it may be shown: URL credentials inside any argument masked
    (`postgresql://****@host/db`), and the value of a credential flag (`--token X`,
    `--api-key=X`) as `****`."""
    return [shown for shown, _ in _credentials(args)]


def argument_secrets(args: Sequence[str]) -> tuple[str, ...]:
    """The secrets `mask_credentials` hides in a command line."""
    found = [secret for _, secrets in _credentials(args) for secret in secrets]
    return tuple(s for s in dict.fromkeys(found) if s)


def _credentials(args: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """Each argument as it may be shown, with the secrets that hides."""
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        previous = args[i - 1] if i > 0 else ""
        if eq and _is_credential_flag(flag):
            yield f"{flag}={MASK}", [value]
        elif not arg.startswith("-") and "=" not in previous and _is_credential_flag(previous):
            yield MASK, [arg]
        elif "://" in arg:  # the pattern is tried only where it may match
            shown = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), arg)
            yield shown, [s for url in _URL_IN_TEXT.findall(arg) for s in url_secrets(url)]
        else:
            yield arg, []


# The last word of a flag whose value is a credential. Stricter than is_secret_name: a
# flag's value is the next argument, and `--token-file PATH` or `--no-auth PATH` must not
# make a path a secret (it would be redacted wherever it is shown).
_CREDENTIAL_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "pass", "pwd", "passphrase"}
    | {"credential", "credentials", "auth", "dsn"}
)


def _is_credential_flag(flag: str) -> bool:
    if not flag.startswith("-"):
        return False
    words = [w for w in re.split(r"[-_]", flag[:256].lower()) if w]
    return bool(words) and words[0] != "no" and words[-1] in _CREDENTIAL_WORDS
