"""Keeping a tool within what the model is sent, what may be committed, and its time.

`truncate` cuts a finished text; `CappedOutput` does the same to a stream (a bash command
may print gigabytes) with bounded memory. `clean_text` is what the agent loop applies to
every result before it is committed.

read_file, list_files and grep are replayed after a crash while a notebook loads its
session (docs/spec.md §2.1), so a file, tree or pattern that made one run forever would
wedge every later kernel too. Each works against a `Deadline`, checked between bounded
steps (a chunk read, a directory entry). One step cannot be bounded that way: a single
`re` search, which backtracks holding the GIL (`(a+)+$` on a long line). `run_in_child`
runs it in a forked child killed at the deadline. Not a linear-time engine (google-re2):
RE2 drops backreferences and lookaround, so grep's documented "Python `re` syntax" would
silently change meaning, and it is a compiled dependency. The child only reads files and
writes one pipe, then `os._exit`s: it touches no lock another thread could have held.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import select
import signal
import time
import warnings
from collections.abc import Callable, Iterable

from ..redaction import redact
from ..words import clean_unicode
from ._base import ToolError, ToolTimeoutError

DEFAULT_TIME_LIMIT = 10.0  # seconds; each reading tool's description states it


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of a long output, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = _split(limit)
    # text[len - tail:] rather than text[-tail:]: with tail == 0 the latter is everything.
    return _elided(text[:head], len(text) - head - tail, text[len(text) - tail :])


def _split(limit: int) -> tuple[int, int]:
    head = max(limit, 0) * 2 // 3
    return head, max(limit, 0) - head


def _elided(head: str, cut: int, tail: str) -> str:
    return f"{head}\n[... {cut} characters truncated ...]\n{tail}"


class CappedOutput:
    """Bytes in, exactly what `truncate` makes of the whole text out, holding at most
    `limit` characters. Decoded incrementally (UTF-8, undecodable bytes replaced), so a
    character split across two reads is still one character."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 0)
        self._head_size, self._tail_size = _split(limit)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head = ""
        self._tail = ""
        self.total = 0  # characters seen

    def feed(self, data: bytes, *, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        self.total += len(text)
        room = self._head_size - len(self._head)
        if room > 0:
            self._head += text[:room]
            text = text[room:]
        # While the total is within the limit the tail must hold all after the head.
        if self._tail_size and text:
            self._tail = (self._tail + text)[-self._tail_size :]

    def text(self) -> str:
        self.feed(b"", final=True)
        if self.total <= self.limit:
            return self._head + self._tail
        return _elided(self._head, self.total - self.limit, self._tail)


def clean_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Text (a tool's output, a prompt, the user's cells) as it may be committed, sent to
    the model and shown: valid Unicode (`clean_unicode`: a lone surrogate from a file name
    that is not UTF-8 would make the commit fail) with every secret redacted."""
    return redact(clean_unicode(text), secrets)


class Deadline:
    """A point in time (monotonic clock) after which the tool stops, and why it says so."""

    def __init__(self, seconds: float, advice: str) -> None:
        self.seconds = seconds
        self._advice = advice
        self._end = time.monotonic() + seconds

    def remaining(self) -> float:
        return self._end - time.monotonic()

    def check(self) -> None:
        if self.remaining() <= 0:
            raise self.expired()

    def expired(self) -> ToolTimeoutError:
        return ToolTimeoutError(
            f"stopped at its time limit of {self.seconds:g} s; nothing was changed and "
            f"the result is unknown. {self._advice}"
        )


def run_in_child(work: Callable[[], object], deadline: Deadline) -> object:
    """`work()`'s JSON-serialisable value, computed in a forked child that is SIGKILLed
    when the deadline passes (then ToolTimeoutError), or on Ctrl-C in the parent. A
    ToolError raised by `work` is raised here; `work` translates anything else itself."""
    deadline.check()
    read_end, write_end = os.pipe()
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns about forking a threaded process (a kernel always is);
            # the child is written for exactly that case (see the module docstring).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError as exc:  # out of processes or memory
        os.close(read_end)
        os.close(write_end)
        raise ToolError(f"could not start the search process ({exc.strerror}); try again") from None
    if pid == 0:  # pragma: no cover - the child; its effect is checked through the pipe
        os.close(read_end)
        _child(work, write_end)
    os.close(write_end)
    try:
        data = _read_until(read_end, deadline)
    finally:
        os.close(read_end)
        with contextlib.suppress(ProcessLookupError):  # reaped whether finished or not
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if data is None:
        raise deadline.expired()
    try:
        answer = json.loads(data)
    except ValueError:
        raise ToolError("the search process ended without an answer; nothing was changed") from None
    if "timedOut" in answer:
        raise deadline.expired()
    if "error" in answer:
        raise ToolError(answer["error"])
    return answer["value"]


def _child(work: Callable[[], object], write_end: int) -> None:  # pragma: no cover
    code = 0
    try:
        try:
            answer: dict[str, object] = {"value": work()}
        except ToolTimeoutError:
            answer = {"timedOut": True}
        except ToolError as exc:
            answer = {"error": str(exc)}
        data = json.dumps(answer).encode("ascii")
        while data:
            data = data[os.write(write_end, data) :]
    except BaseException:
        code = 1
    # Never return into the caller's stack (it would run the kernel's code twice), never
    # run atexit handlers or flush buffers inherited from the parent.
    os._exit(code)


def _read_until(fd: int, deadline: Deadline) -> bytes | None:
    """Everything written to the pipe until EOF, or None if the deadline passes first."""
    chunks: list[bytes] = []
    # poll, not select: select cannot watch a descriptor numbered 1024 or more.
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while (left := deadline.remaining()) > 0 and poller.poll(left * 1000):
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
    return None
