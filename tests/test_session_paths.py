"""Whatever a path names and whatever a file without an LF holds, the store neither
damages somebody else's file nor hangs: only an empty file or a torn session header is
ever overwritten, and only a regular file is ever opened, read or written."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tiny_agent_nb.session import (
    HeaderInit,
    NotASessionError,
    SessionStore,
    load_session,
)
from tiny_agent_nb.session._framing import HEADER_START, is_torn_header

OLD_NS = 1_000_000_000 * 1_000_000_000  # 2001-09-09: any write would move mtime to now


@contextmanager
def untouched(path: Path) -> Iterator[None]:
    """Fails unless the file's bytes and mtime are the same after the block."""
    os.utime(path, ns=(OLD_NS, OLD_NS))
    before = path.read_bytes()
    yield
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == OLD_NS


# ---------------------------------------------------------------- torn header vs other files

# What an unrelated file without a final LF can hold: none of it is ever overwritten.
NOT_A_TORN_HEADER = {
    "settings-json": b'{"theme": "dark", "fontSize": 14}',
    "compact-json": b'{"kind":"note","text":"keep me"}',
    "spaced-header": b'{"kind": "header", "version": 2}',
    "other-version": b'{"kind":"header","version":3,"id":"x"',
    "kind-headers": b'{"kind":"headers"',
    "text": b"remember the milk",
    "one-space": b" ",
    "binary": b"\x00\x01\xff",
    "brace-then-text": b"{hello",
}

# What a writer that died while creating a session can have left.
TORN_HEADERS = {
    "empty": b"",
    "one-brace": b"{",
    "inside-kind": b'{"kind":"hea',
    "kind-done": b'{"kind":"header"',
    "inside-id": HEADER_START + b'"id":"019',
    "whole-line-no-lf": HEADER_START
    + b'"id":"01a22960-953b-7b8c-9834-3e442e43865b","createdAt":1,"cwd":"/w","provider":"p",'
    b'"model":"m","environmentIdentity":"/w"}',
}


@pytest.mark.parametrize("content", NOT_A_TORN_HEADER.values(), ids=NOT_A_TORN_HEADER.keys())
def test_create_refuses_a_file_without_lf_that_is_no_torn_header(
    tmp_path: Path, header_init: HeaderInit, content: bytes
) -> None:
    settings = tmp_path / "settings.json"
    settings.write_bytes(content)
    with untouched(settings), pytest.raises(NotASessionError) as info:
        SessionStore.open(settings, create=header_init)
    assert "not a tiny-agent-nb session" in str(info.value)
    # It says what the file is not, rather than calling a foreign file a torn session.
    assert "torn" not in str(info.value) and "session header" in str(info.value)
    # The refusal released the path: a later open of a real session there would work.
    settings.unlink()
    SessionStore.open(settings, create=header_init).close()


@pytest.mark.parametrize("content", TORN_HEADERS.values(), ids=TORN_HEADERS.keys())
def test_create_repairs_an_empty_file_or_a_torn_header(
    session_path: Path, header_init: HeaderInit, content: bytes
) -> None:
    session_path.write_bytes(content)
    with SessionStore.open(session_path, create=header_init) as store:
        assert store.created
        header = store.header
    assert session_path.read_bytes() == header.model_dump_json().encode() + b"\n"
    assert load_session(session_path).header == header


def test_header_start_is_what_the_writer_writes_first(
    session_path: Path, header_init: HeaderInit
) -> None:
    with SessionStore.open(session_path, create=header_init):
        pass
    written = session_path.read_bytes()
    assert written.startswith(HEADER_START)
    # Every cut of a real header line (the LF not yet written) is a torn header.
    line = written.rstrip(b"\n")
    assert all(is_torn_header(line[:cut]) for cut in range(len(line) + 1))
    assert not is_torn_header(written)


# ---------------------------------------------------------------- regular files only


def test_create_refuses_a_directory(tmp_path: Path, header_init: HeaderInit) -> None:
    directory = tmp_path / "notebook.agent.jsonl"
    directory.mkdir()
    with pytest.raises(NotASessionError, match="directory"):
        SessionStore.open(directory, create=header_init)
    with pytest.raises(NotASessionError, match="directory"):
        load_session(directory)
    assert list(directory.iterdir()) == []


def test_create_refuses_dev_null(header_init: HeaderInit) -> None:
    # /dev/null would swallow every commit: the session would look fine and keep nothing.
    with pytest.raises(NotASessionError, match="character device"):
        SessionStore.open("/dev/null", create=header_init)
    with pytest.raises(NotASessionError, match="character device"):
        load_session("/dev/null")


def test_create_refuses_a_fifo_and_writes_nothing_into_it(
    tmp_path: Path, header_init: HeaderInit
) -> None:
    fifo = tmp_path / "notebook.agent.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(NotASessionError, match="FIFO"):
        SessionStore.open(fifo, create=header_init)
    # Nothing is waiting in the pipe: a non-blocking read finds it empty, not a header.
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert os.read(fd, 4096) == b""
    finally:
        os.close(fd)


# On the base code these readers blocked forever (a FIFO with no writer) or read until
# memory ran out (/dev/zero), so they run in a child with a deadline and a memory cap.
LOAD_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from tiny_agent_nb.session import NotASessionError, SessionStore, load_session
for path in sys.argv[1:]:
    for open_it in (load_session, SessionStore.open):
        try:
            open_it(path)
        except NotASessionError as exc:
            print(exc.reason)
        else:
            print("opened")
"""


def _load_in_child(*paths: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", LOAD_CHILD, *paths],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


def test_reading_a_fifo_or_dev_zero_is_refused_without_waiting_or_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "session.jsonl"
    os.mkfifo(fifo)
    is_a_fifo = "it is a FIFO (named pipe); a session is a regular file"
    is_a_device = "it is a character device; a session is a regular file"
    assert _load_in_child(str(fifo), "/dev/zero") == [is_a_fifo] * 2 + [is_a_device] * 2
