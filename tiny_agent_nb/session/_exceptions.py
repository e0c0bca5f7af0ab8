"""Errors raised by the session store. Their tree, with every other error of the
package, is drawn in one place: tiny_agent_nb/_exceptions.py."""

from __future__ import annotations

from pathlib import Path

from .._exceptions import TinyAgentError


class SessionError(TinyAgentError):
    """Base class of every error the session store raises."""


class NotASessionError(SessionError):
    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path} is not a tiny-agent-nb session: {reason}")


class SessionCorruptError(SessionError):
    """A complete line of the file is not a valid transaction.

    The file is never modified by the reader that found this; `line` counts from 1
    (the header is line 1).
    """

    def __init__(self, path: str | Path, line: int, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        super().__init__(
            f"line {line} of {self.path} is damaged: {reason.rstrip('.')}. The file was not "
            "modified; "
            + (
                f"`tiny-agent-nb salvage {self.path} --out NEW` copies the lines before it "
                "into NEW."
                if line > 1
                else "its header is invalid, so nothing in it can be salvaged."
            )
        )


class SessionLockedError(SessionError):
    def __init__(self, path: str | Path, holder_pid: int | None, *, in_process: bool) -> None:
        self.path = str(path)
        self.holder_pid = holder_pid
        self.in_process = in_process
        if in_process:
            who = "another SessionStore in this process"
        elif holder_pid is not None:
            who = f"process {holder_pid}"
        else:
            who = "another process"
        super().__init__(
            f"{self.path} is open for writing by {who}. A session has one writer at a time: "
            "close it there (or stop that kernel), or open this file read-only with load_session()."
        )


class InvalidTransactionError(SessionError):
    """A commit broke the format or an invariant; nothing was written and state is unchanged.

    `index` is the 0-based position of the offending fact (the message counts from 1).
    """

    def __init__(self, reason: str, *, index: int | None = None) -> None:
        self.reason = reason
        self.index = index
        where = f"fact {index + 1} of the transaction: " if index is not None else ""
        super().__init__(f"transaction refused, nothing written: {where}{reason}")


class SessionClosedError(SessionError):
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        super().__init__(f"{self.path}: this SessionStore is closed")


class SessionWriteError(SessionError):
    """The OS refused the write (disk full, quota, I/O error). Nothing was committed."""

    def __init__(self, path: str, exc: OSError) -> None:
        self.path = path
        self.errno = exc.errno
        super().__init__(
            f"could not append to {path}: {exc.strerror or exc}. Nothing was committed and "
            "the file was cut back to its last complete transaction."
        )


class SessionReplacedError(SessionError):
    """The store's path no longer names the file it holds open and locked (docs/session-format.md
    §6.4): another file was renamed over it, or it was deleted or moved. The line just
    written was cut back: nothing was committed, and nothing was written anywhere."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(
            f"{self.path} is no longer the file this writer opened: {reason}. Nothing was "
            "written. Open the path again to go on from the file now there."
        )


class FileStoreError(SessionError):
    """The file store cannot give or keep a blob: absent, damaged, or its directory unusable."""
