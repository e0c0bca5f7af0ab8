"""Snapshots that are not believed (docs/spec.md §14): over bytes that changed, damaged,
under another key or version, reached through a symlink, unwritable, or keyless. Each
gives exactly the state of a full read of the same bytes, and costs nothing else.
"""

from __future__ import annotations

import os
import random
import shutil
import stat
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from test_session_snapshot import (
    _long_run,
    _same_as_full_read,
    _snapshot_of,
    _used,
    long_session,
)

from tiny_agent_nb.session import (
    HeaderInit,
    SessionStore,
    load_session,
)
from tiny_agent_nb.session import _snapshot_codec as codec
from tiny_agent_nb.session._snapshot import (
    SNAPSHOT_TAIL,
    snapshot_path,
)
from tiny_agent_nb.session._snapshot_key import KEY_NAME, state_dir
from tiny_agent_nb.session._tables import Operation, ToolIntent

from helpers.scenario import complete_run

__all__ = ["long_session"]  # the fixtures, from test_session_snapshot


# ---------------------------------------------------------------- changed sessions


def test_a_changed_byte_in_the_covered_prefix_gives_a_full_read(tmp_path: Path) -> None:
    path = tmp_path / "s.agent.jsonl"
    init = HeaderInit(cwd="/w", provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        for _ in range(3):
            complete_run(store)
    data = path.read_bytes()
    ends = [i for i, b in enumerate(data) if b == 0x0A]
    rng = random.Random(14)
    spots = {p for e in ends for p in (e - 1, e, e + 1) if p < len(data)}
    spots |= set(rng.sample(range(len(data)), 60))
    _snapshot_of(path, data, alter=True)
    for spot in sorted(spots):
        for new in {data[spot] ^ 0x01, ord(" "), ord("\n")} - {data[spot]}:
            path.write_bytes(data[:spot] + bytes([new]) + data[spot + 1 :])
            _same_as_full_read(path)
    path.write_bytes(data)
    assert _used(path)  # the snapshot was good for the bytes it was made from


def test_a_truncated_session_gives_a_full_read(long_session: Path) -> None:
    data = long_session.read_bytes()
    _snapshot_of(long_session, data, alter=True)
    ends = [i for i, b in enumerate(data) if b == 0x0A]
    for cut in [*ends[-3:], ends[-1] + 1 - 1, ends[-2] + 5, len(data) // 2, 10]:
        long_session.write_bytes(data[:cut])
        _same_as_full_read(long_session)


def test_a_corrupt_line_after_the_snapshot_is_reported_at_its_line(long_session: Path) -> None:
    data = long_session.read_bytes()
    _snapshot_of(long_session, data)
    long_session.write_bytes(data + b'{"kind":"entry"}\n')
    error = _same_as_full_read(long_session)
    assert error[:2] == ("SessionCorruptError", data.count(b"\n") + 1)


def test_the_same_bytes_in_another_file_still_load_as_a_full_read(long_session: Path) -> None:
    other = long_session.with_name("copy.agent.jsonl")
    shutil.copy(long_session, other)
    _snapshot_of(other, other.read_bytes(), alter=True)
    assert _used(other)  # its bytes are those it was made from: that is all that counts


# ---------------------------------------------------------------- hostile snapshots


def _rewrite(path: Path, change: Any) -> None:
    snapshot = snapshot_path(path)
    snapshot.write_bytes(change(snapshot.read_bytes()))


@pytest.mark.parametrize(
    "change",
    [
        lambda raw: raw[: len(raw) // 2],  # truncated
        lambda raw: b"",
        lambda raw: os.urandom(len(raw)),  # garbage
        lambda raw: raw.replace(b"mac=", b"mac=0", 1)[:-1],
        lambda raw: raw[:40] + b"9" + raw[41:],  # the counts in the first line
        lambda raw: raw.replace(b'"lastSeq":', b'"lastSeq":1', 1),  # the body, MAC kept
        lambda raw: raw + b" ",
    ],
    ids=["truncated", "empty", "garbage", "mac", "first-line", "body", "tail"],
)
def test_a_damaged_snapshot_gives_a_full_read(long_session: Path, change: Any) -> None:
    _snapshot_of(long_session, long_session.read_bytes(), alter=True)
    _rewrite(long_session, change)
    _same_as_full_read(long_session)


def test_a_snapshot_under_another_key_gives_a_full_read(
    long_session: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "elsewhere"))
    _snapshot_of(long_session, long_session.read_bytes(), alter=True)  # a foreign user's key
    monkeypatch.undo()
    _same_as_full_read(long_session)


def test_a_snapshot_of_another_version_gives_a_full_read(
    long_session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codec, "SNAPSHOT_VERSION", 0)
    _snapshot_of(long_session, long_session.read_bytes(), alter=True)
    monkeypatch.undo()
    _same_as_full_read(long_session)


def test_a_snapshot_reached_through_a_symlink_is_not_read(long_session: Path) -> None:
    _snapshot_of(long_session, long_session.read_bytes(), alter=True)
    real = long_session.with_name("elsewhere.snapshot")
    snapshot_path(long_session).rename(real)
    snapshot_path(long_session).symlink_to(real)
    _same_as_full_read(long_session)


def test_the_writer_replaces_a_symlink_and_never_writes_through_it(
    long_session: Path,
) -> None:
    target = long_session.with_name("target.txt")
    target.write_text("not yours")
    snapshot = snapshot_path(long_session)
    snapshot.unlink()
    snapshot.symlink_to(target)
    SessionStore.open(long_session).close()  # no usable snapshot: the writer makes one
    assert target.read_text() == "not yours"
    assert not snapshot.is_symlink() and stat.S_IMODE(snapshot.stat().st_mode) == 0o600


def test_a_snapshot_path_that_cannot_be_written_costs_nothing(long_session: Path) -> None:
    snapshot = snapshot_path(long_session)
    snapshot.unlink()
    snapshot.mkdir()  # neither readable as a snapshot nor replaceable by one
    SessionStore.open(long_session).close()  # it tries, at open and at close
    assert snapshot.is_dir() and not list(long_session.parent.glob(".*.tmp"))
    _same_as_full_read(long_session)


def test_without_a_usable_key_there_is_no_snapshot_and_no_error(
    session_path: Path, header_init: HeaderInit, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_home = state_dir().parent
    blocker = state_home / "blocked"
    blocker.write_text("a file where the state directory would be")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    with SessionStore.open(session_path, create=header_init) as store:
        _long_run(store, 60)
    assert not snapshot_path(session_path).exists()
    assert load_session(session_path).transaction_count > SNAPSHOT_TAIL


def test_a_key_others_can_read_is_no_key(long_session: Path) -> None:
    _snapshot_of(long_session, long_session.read_bytes(), alter=True)
    key = state_dir() / KEY_NAME
    key.chmod(0o644)
    try:
        _same_as_full_read(long_session)
    finally:
        key.chmod(0o600)
    assert _used(long_session)


def test_a_record_whose_fields_change_makes_older_snapshots_another_version() -> None:
    """A field added to a table record (a later release) changes the version a snapshot
    carries, so snapshots written before are read in full, not decoded into the wrong
    fields."""

    class AttemptWithMore(NamedTuple):
        id: str
        more: int

    assert codec.layout_version() == codec.SNAPSHOT_VERSION
    changed = codec.layout_version((Operation, AttemptWithMore, ToolIntent))
    assert changed != codec.SNAPSHOT_VERSION
    assert changed.split(":")[0] == codec.SNAPSHOT_VERSION.split(":")[0]
