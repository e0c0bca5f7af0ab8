"""The file store: content-addressed blobs of a session's file history, on real files in a
temporary state directory (never the user's)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from tiny_agent_nb.session import FileStore, FileStoreError
from tiny_agent_nb.session._file_store import state_root

SESSION = "0190b2a1-7c3e-7d41-8a2b-1234567890ab"


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_put_returns_the_sha256_digest_and_get_gives_the_bytes_back(tmp_path: Path) -> None:
    store = FileStore.for_session(SESSION, tmp_path)
    data = b"\x00\xffbinary\nand text\r\n"
    digest = store.put(data)
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert store.has(digest)
    assert store.get(digest) == data
    assert store.put(data) == digest  # idempotent: one blob
    assert [p.name for p in (tmp_path / SESSION).iterdir()] == [digest.removeprefix("sha256:")]
    assert store.put(b"") == "sha256:" + hashlib.sha256(b"").hexdigest()


def test_directories_are_0700_and_blobs_0600(tmp_path: Path) -> None:
    root = tmp_path / "state" / "tiny-agent-nb" / "files"
    store = FileStore.for_session(SESSION, root)
    digest = store.put(b"secret before-image")
    for directory in (tmp_path / "state", root.parent, root, root / SESSION):
        assert _mode(directory) == 0o700
    assert _mode(root / SESSION / digest.removeprefix("sha256:")) == 0o600


def test_the_state_root_follows_xdg_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert state_root() == tmp_path / "tiny-agent-nb" / "files"
    store = FileStore.for_session(SESSION)
    assert store.directory == tmp_path / "tiny-agent-nb" / "files" / SESSION
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_root() == tmp_path / "home" / ".local" / "state" / "tiny-agent-nb" / "files"


def test_get_verifies_the_digest(tmp_path: Path) -> None:
    store = FileStore.for_session(SESSION, tmp_path)
    digest = store.put(b"original")
    blob = tmp_path / SESSION / digest.removeprefix("sha256:")
    blob.write_bytes(b"damaged!")
    with pytest.raises(FileStoreError, match="damaged"):
        store.get(digest)
    # put repairs it: a blob whose size is wrong is written again
    blob.write_bytes(b"short")
    assert store.put(b"original") == digest
    assert store.get(digest) == b"original"


def test_a_missing_blob_or_a_bad_digest_raises(tmp_path: Path) -> None:
    store = FileStore.for_session(SESSION, tmp_path)
    absent = "sha256:" + "0" * 64
    assert not store.has(absent)
    with pytest.raises(FileStoreError, match="not in"):
        store.get(absent)
    with pytest.raises(FileStoreError, match="not a sha256 digest"):
        store.get("sha256:../../etc/passwd")


@pytest.mark.parametrize("bad", ["", "..", ".hidden", "a/b", "../x", "a\0b"])
def test_a_session_id_that_is_not_a_plain_name_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(FileStoreError, match="not a session id"):
        FileStore.for_session(bad, tmp_path)


def test_no_symlink_is_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "files"
    root.mkdir()
    (root / SESSION).symlink_to(elsewhere)
    with pytest.raises(FileStoreError, match="not a directory"):
        FileStore.for_session(SESSION, root).put(b"x")
    assert list(elsewhere.iterdir()) == []
    # a blob replaced by a symlink is neither read nor counted as present
    store = FileStore.for_session(SESSION, tmp_path / "other")
    digest = store.put(b"kept")
    blob = store.directory / digest.removeprefix("sha256:")
    target = tmp_path / "target"
    target.write_bytes(b"kept")
    blob.unlink()
    blob.symlink_to(target)
    assert not store.has(digest)
    with pytest.raises(FileStoreError):
        store.get(digest)


def test_fits_names_the_cap_passed(tmp_path: Path) -> None:
    store = FileStore.for_session(SESSION, tmp_path, max_file=10, max_session=25)
    assert store.fits(b"0123456789", b"") is None
    assert "per-file cap of 10" in (store.fits(b"x" * 11) or "")
    store.put(b"a" * 10)
    store.put(b"b" * 10)
    assert store.size() == 20
    assert store.fits(b"a" * 10, b"c" * 5) is None  # a blob stored already costs nothing
    assert "cap of 25 bytes" in (store.fits(b"c" * 6) or "")
    assert FileStore.for_session(SESSION, tmp_path).size() == 20  # counted from the disk


def test_collect_removes_what_the_session_names_nowhere_once_old(tmp_path: Path) -> None:
    store = FileStore.for_session(SESSION, tmp_path)
    named, orphan = store.put(b"named"), store.put(b"orphan")
    temp = store.directory / ".tmp-0123456789abcdef"  # a put a crash cut off
    temp.write_bytes(b"half")
    other = store.directory / "notes.txt"  # not the store's: left alone
    other.write_bytes(b"x")
    session = f'{{"arguments":{{"file":{{"before":"{named}"}}}}}}\n'.encode()
    reads: list[bytes] = []

    def read() -> bytes:
        reads.append(session)
        return session

    assert store.collect(read) == 0  # all younger than the grace
    assert reads == []  # so the session file is not read
    for path in store.directory.iterdir():
        os.utime(path, (1, 1))
    assert store.collect(lambda: session) == 2
    assert store.has(named) and not store.has(orphan)
    assert sorted(p.name for p in store.directory.iterdir()) == sorted(
        [named.removeprefix("sha256:"), "notes.txt"]
    )
    assert store.size() == len(b"named")
    assert FileStore.for_session(SESSION, tmp_path / "none").collect(lambda: session) == 0


def test_putting_a_blob_again_makes_it_young(tmp_path: Path) -> None:
    store = FileStore.for_session(SESSION, tmp_path)
    digest = store.put(b"again")
    blob = store.directory / digest.removeprefix("sha256:")
    os.utime(blob, (1, 1))
    store.put(b"again")
    assert store.collect(lambda: b"") == 0 and store.has(digest)
