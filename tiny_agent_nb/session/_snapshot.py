"""Snapshots: the reduced tables of a session's first lines, kept beside it (docs/spec.md §14).

`<session file>.snapshot` lets a reader skip reducing the lines it covers. It is derived
and disposable: the session file stays the only copy of anything, a snapshot is believed
only when it proves both what it covers and who wrote it, and anything else about it --
missing, truncated, garbage, another version, stale, forged, a symlink, unreadable --
makes the reader ignore it silently and reduce the whole file, as if it did not exist.

The file is one line of text, then the body (`_snapshot_codec`):

    tiny-agent-nb snapshot 3 lines=<N> bytes=<B> json=<J> mac=<64 hex>\\n<body>

The body is J bytes of JSON, then a binary section the JSON points into (ids, integer
columns).
N transaction lines (the header's not counted) and B bytes: the session's first B bytes,
which end with the N-th transaction's LF. The MAC is HMAC-SHA256, under the user's key
(`_snapshot_key`), of that first line up to `mac=`, the body, and the SHA-256 of each
64 KiB block of those B bytes of the session: so a snapshot is used only over the very
bytes it was made from, and only if this user's writer made it. The lines after the B
bytes are reduced by the normal reader, so damage there is reported at its own line number.

Only the writer (SessionStore) writes one; `load_session` only reads.
"""

from __future__ import annotations

import hmac
import logging
import mmap
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from ._files import fsync_dir
from ._gc import gc_paused
from ._snapshot_codec import decode_tables, parse_body
from ._snapshot_encode import encode_tables
from ._snapshot_key import key_for_writing, read_key
from ._source import BLOCK, BLOCK_DIGEST_SIZE, PRIVATE_MAP, Source
from ._tables import Tables

SUFFIX = ".snapshot"
# A session's snapshot is smaller than the session (its values come from the lines);
# anything much larger is not one of ours, and is not read into memory.
_SLACK = 1 << 20
_FIRST = re.compile(rb"tiny-agent-nb snapshot 3 lines=(\d{1,12}) bytes=(\d{1,15}) json=(\d{1,15}) ")
_MAC = re.compile(rb"mac=([0-9a-f]{64})\n")
_MAP_FROM = 128 << 10  # glibc's M_MMAP_THRESHOLD before any raise

log = logging.getLogger("tiny_agent_nb.session")


def snapshot_path(path: str | Path) -> Path:
    return Path(f"{os.fspath(path)}{SUFFIX}")


def _mac(key: bytes, first: bytes, body: tuple[bytes | memoryview, ...], blocks: bytes) -> bytes:
    """Of the first line up to `mac=`, the body (given in pieces), and the SHA-256 of each
    block of the session's first B bytes (as good as the bytes themselves, and what a
    reader keeps)."""
    mac = hmac.new(key, first, "sha256")
    for piece in body:
        mac.update(piece)
    mac.update(blocks)
    return mac.digest()


# ---------------------------------------------------------------- reading


def _read_snapshot(path: Path, limit: int) -> bytes | mmap.mmap | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # missing, a symlink (ELOOP), unreadable
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not 0 < st.st_size <= limit:
            return None
        # perf: register row "read-sizes" (docs/benchmarks.md)
        # perf: register row "snapshot-read-map" (docs/benchmarks.md)
        # Its size and no more; from glibc's initial mmap threshold up, into an anonymous
        # memory map: a `bytes` of its size, freed, raised that threshold, and the
        # temporaries of what follows (the context's build) then left holes in its heap.
        # Below it, a `bytes` raises nothing and costs no mapping.
        if st.st_size < _MAP_FROM:
            small = os.read(fd, st.st_size)
            return None if len(small) != st.st_size or os.read(fd, 1) else small
        data = mmap.mmap(-1, st.st_size, **PRIVATE_MAP)
        with memoryview(data) as view:
            filled = 0
            while filled < st.st_size:
                got = os.readv(fd, [view[filled:]])
                if not got:
                    return None  # changed while read
                filled += got
        if os.read(fd, 1):
            return None  # changed while read
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


# Told what an authentic snapshot covers (transaction lines, bytes) before it is decoded;
# False: not decoded (None).
Verified = Callable[[int, int], bool]


def _decode_any(covered: int, end: int) -> bool:
    return True


def load_snapshot(
    path: str | Path, source: Source, size: int, start: int, verified: Verified = _decode_any
) -> Tables | None:
    """The tables of the snapshot beside `path`, if it is authentic and made from a
    prefix of the file's first `size` bytes in `source` (whose lines start at `start`);
    their lines end where that prefix does. None for anything else, and when `verified`
    (called once the snapshot is found authentic, before anything is decoded) says no.
    Never raises, never writes."""
    try:
        return _load(path, source, size, start, verified)
    except Exception:  # any failure of any kind means: read in full
        log.debug("snapshot of %s ignored", path, exc_info=True)
        return None


def _load(
    path: str | Path, source: Source, size: int, start: int, verified: Verified
) -> Tables | None:
    raw = _read_snapshot(snapshot_path(path), size + _SLACK)
    if raw is None:
        return None
    first = _FIRST.match(raw)
    if first is None:
        return None
    mac = _MAC.match(raw, first.end())
    if mac is None:
        return None
    covered, end = int(first[1]), int(first[2])
    if not start <= end <= size:
        return None
    key = read_key()
    if key is None:
        return None
    # One pass over the covered bytes, a chunk at a time: their blocks' digests, which
    # the MAC covers and the state keeps to check the lines it reads back (§14.1).
    blocks, last = source.block_digests(end)
    if last != b"\n" or len(blocks) != -(-end // BLOCK) * BLOCK_DIGEST_SIZE:
        return None  # the file is shorter now, or the B-th byte is no LF
    split = mac.end() + int(first[3])
    with memoryview(raw) as view:
        if not hmac.compare_digest(
            _mac(key, raw[: first.end()], (view[mac.end() :],), blocks),
            bytes.fromhex(mac[1].decode("ascii")),
        ):
            return None
        if split > len(raw) or not verified(covered, end):
            return None
        # The JSON text decoded straight from the map (one temporary, not two) and freed
        # once parsed, before the tables are built (register row "snapshot-read-map").
        body = parse_body(str(view[mac.end() : split], "utf-8"))
        tables = decode_tables(body, view[split:], source, (start, end, blocks))
        del body
    if len(tables.lines) != covered:
        return None
    return tables


# ---------------------------------------------------------------- writing

_DRAFT_ID = re.compile(r"[0-9a-f]{12}")


def move_snapshot(path: str | Path, target: str | Path) -> None:
    """Take `path`'s snapshot along when its session is renamed to `target` (the writer
    did it, holding the lock), so that it stays beside the bytes it describes. Never
    raises: one left behind would only be ignored beside the next session."""
    try:
        snapshot_path(path).rename(snapshot_path(target))  # a symlink moves, unfollowed
    except FileNotFoundError:
        pass
    except OSError:
        log.debug("snapshot of %s not moved to %s", path, target, exc_info=True)


def _draft(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.urandom(6).hex()}.tmp")


def remove_drafts(path: str | Path) -> None:
    """Remove the drafts of `path`'s snapshot a writer killed mid-write left (as large
    as a snapshot each). Called by a writer as it opens: only the writer, holding the
    session's lock, writes a draft, so any found then is no one's. Never raises."""
    target = snapshot_path(path)
    prefix = f".{target.name}."

    def is_draft(name: str) -> bool:
        middle = name[len(prefix) : -len(".tmp")]
        return (
            name.startswith(prefix) and name.endswith(".tmp") and bool(_DRAFT_ID.fullmatch(middle))
        )

    try:
        drafts = [p for p in target.parent.iterdir() if is_draft(p.name)]
    except OSError:
        return
    for draft in drafts:
        try:
            draft.unlink()  # a symlink goes, not what it names
        except OSError:
            log.debug("%s not removed", draft, exc_info=True)


# Transaction lines left to reduce past a snapshot before the writer makes a new one:
# reducing this many costs a resume a few milliseconds; a snapshot of a long session costs
# its writer far more (docs/benchmarks.md, register row "snapshot").
SNAPSHOT_TAIL = 256


def refresh_snapshot(
    path: Path, header_line: bytes, tables: Tables, covered: int, *, sync: bool
) -> int:
    """The writer's policy, at open and at close: a new snapshot of `tables` when the one
    on disk (of `covered` lines; 0: none usable) leaves SNAPSHOT_TAIL lines or more to
    reduce. Returns the lines the snapshot on disk covers now. It can fail without
    consequence."""
    lines = tables.lines
    if len(lines) - covered < SNAPSHOT_TAIL:
        return covered
    try:
        if write_snapshot(path, header_line, tables, sync=sync):
            return len(lines)
    except Exception:
        log.exception("could not write the snapshot of %s", path)
    return covered


def _write_all(fd: int, pieces: list[bytes]) -> None:
    views = [memoryview(piece) for piece in pieces]
    while views:
        done = os.writev(fd, views)
        while views and done >= len(views[0]):
            done -= len(views.pop(0))
        if views:
            views[0] = views[0][done:]


def write_snapshot(path: str | Path, header_line: bytes, tables: Tables, *, sync: bool) -> bool:
    """Write the snapshot of `tables` (all of its lines) beside `path`: a new file, then a
    rename over the old one. False (and nothing left behind) when it cannot be made; a
    snapshot is never worth an error."""
    key = key_for_writing()
    if key is None:
        return False
    with gc_paused():
        encoded = encode_tables(tables)
    if encoded is None:
        return False
    text, binary = encoded
    lines = tables.lines
    size = len(header_line) + 1 + sum(lines.sizes())
    first = b"tiny-agent-nb snapshot 3 lines=%d bytes=%d json=%d " % (len(lines), size, len(text))
    mac = _mac(key, first, (text, binary), lines.block_digests(header_line + b"\n"))
    # Written in its pieces (`os.writev`), never joined: a copy of the snapshot is a
    # large temporary, and large temporaries leave the kernel's heap with resident holes
    # (register row "scan-map").
    pieces = [first, b"mac=%s\n" % mac.hex().encode("ascii"), text, binary]
    target = snapshot_path(path)
    draft = _draft(target)
    try:
        fd = os.open(
            draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError:
        return False
    try:
        try:
            _write_all(fd, pieces)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        draft.replace(target)  # replaces a symlink at `target`, never follows it
        if sync:
            fsync_dir(target.parent)
    except OSError:
        log.debug("snapshot of %s not written", path, exc_info=True)
        draft.unlink(missing_ok=True)
        return False
    return True
