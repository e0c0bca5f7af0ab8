"""`tiny-agent-nb salvage FILE --out NEW`: the longest loadable prefix of a damaged file
into a new one (FILE is only read), and `session.salvage`, its pure core."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tiny_agent_nb.session import (
    SessionCorruptError,
    load_session,
    salvage,
)

from helpers.cli_helpers import (
    FIXTURES,
    TORN,
    cli,
    corrupt_fixtures,
    not_a_session_fixtures,
    replace_line,
    untouched,
)


def _salvage(
    capsys: pytest.CaptureFixture[str], source: Path, out: Path | str, *flags: str
) -> tuple[int, str, str]:
    with untouched(source):
        return cli(capsys, "salvage", str(source), "--out", str(out), *flags)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    directory.mkdir()
    return directory


def test_there_are_corrupt_fixtures_to_salvage() -> None:
    assert len(corrupt_fixtures()) >= 30
    assert len(corrupt_fixtures(header=True)) >= 2
    assert len(not_a_session_fixtures()) >= 3


@pytest.mark.parametrize("fixture", corrupt_fixtures(), ids=lambda p: p.stem)
def test_salvage_every_corrupt_fixture(
    capsys: pytest.CaptureFixture[str], fixture: Path, work: Path
) -> None:
    source = work / fixture.name
    shutil.copyfile(fixture, source)
    data = source.read_bytes()
    bad: int = json.loads(fixture.with_suffix(".expected.json").read_text("utf-8"))["error"]["line"]
    with pytest.raises(SessionCorruptError) as load_error:
        load_session(source)
    lines = data.split(b"\n")  # the last item is the torn tail (b"" when none)
    before = work / "before.jsonl"
    before.write_bytes(b"".join(line + b"\n" for line in lines[: bad - 1]))
    out = work / "salvaged.jsonl"

    code, stdout, err = _salvage(capsys, source, out, "--json")

    assert (code, err) == (0, "")
    assert out.read_bytes() == before.read_bytes()
    assert load_session(out).summary() == load_session(before).summary()
    report = json.loads(stdout)["salvage"]
    left = report["leftBehind"]
    assert left["badLine"] == bad
    assert left["reason"] == load_error.value.reason
    assert left["badLineBytes"] == len(lines[bad - 1]) + 1
    after = lines[bad:-1]
    assert left["linesAfter"] == len(after)
    assert left["bytesAfter"] == sum(len(line) + 1 for line in after)
    assert left["tornTailBytes"] == len(lines[-1])
    assert report["kept"]["lines"] == bad - 1
    assert report["kept"]["bytes"] + left["bytes"] == len(data)
    assert sorted(p.name for p in work.iterdir()) == sorted(
        [fixture.name, "before.jsonl", "salvaged.jsonl"]
    ), "no temp file is left behind"

    _, text, _ = _salvage(capsys, source, work / "again.jsonl")
    assert f"lines 1-{bad - 1} of {source} into {work / 'again.jsonl'}" in text
    assert f"left behind  line {bad} (" in text
    assert load_error.value.reason in text
    assert f"{source} was not modified" in text


def test_salvage_reports_the_lines_after_the_bad_one(
    capsys: pytest.CaptureFixture[str], completed: Path, work: Path
) -> None:
    replace_line(completed, 4, b"garbage")
    with completed.open("ab") as file:
        file.write(TORN)
    lines = completed.read_bytes().split(b"\n")
    after = len(lines) - 1 - 4  # complete lines after line 4
    after_bytes = sum(len(line) + 1 for line in lines[4:-1])

    code, out, _ = _salvage(capsys, completed, work / "new.jsonl")

    assert code == 0
    assert "left behind  line 4 (8 bytes): invalid JSON at character 1" in out
    assert f"{after} complete line(s) after it, lines 5-{4 + after} ({after_bytes} bytes)" in out
    assert f"a torn tail of {len(TORN)} bytes after the last complete line" in out
    assert "tool calls logged there may have run" in out
    assert "is open in the copy" in out  # the run lost its operationFinished
    assert load_session(work / "new.jsonl").transaction_count == 2


def test_salvage_of_a_valid_file_copies_it_whole(
    capsys: pytest.CaptureFixture[str], three_runs: Path, work: Path
) -> None:
    out = work / "copy.jsonl"

    code, stdout, _ = _salvage(capsys, three_runs, out)

    assert code == 0
    assert out.read_bytes() == three_runs.read_bytes()
    assert load_session(out).summary() == load_session(three_runs).summary()
    assert "left behind  no complete line: every one was copied" in stdout
    assert "torn tail" not in stdout
    assert "warning" not in stdout


def test_salvage_leaves_a_torn_tail_behind(
    capsys: pytest.CaptureFixture[str], completed: Path, work: Path
) -> None:
    whole = completed.read_bytes()
    with completed.open("ab") as file:
        file.write(TORN)
    out = work / "copy.jsonl"

    code, stdout, _ = _salvage(capsys, completed, out, "--json")

    assert code == 0
    assert out.read_bytes() == whole
    left = json.loads(stdout)["salvage"]["leftBehind"]
    assert left == {
        "bytes": len(TORN),
        "badLine": None,
        "reason": None,
        "badLineBytes": 0,
        "linesAfter": 0,
        "bytesAfter": 0,
        "tornTailBytes": len(TORN),
    }
    assert load_session(out).torn_tail_bytes == 0


def test_salvage_copies_the_permission_bits(
    capsys: pytest.CaptureFixture[str], completed: Path, work: Path
) -> None:
    completed.chmod(0o640)

    _salvage(capsys, completed, work / "copy.jsonl")

    assert (work / "copy.jsonl").stat().st_mode & 0o777 == 0o640


def test_salvage_refuses_to_overwrite(
    capsys: pytest.CaptureFixture[str], completed: Path, work: Path
) -> None:
    replace_line(completed, 4, b"garbage")
    out = work / "exists.jsonl"
    out.write_bytes(b"precious")

    with untouched(out):
        code, stdout, err = _salvage(capsys, completed, out)

    assert code == 2
    assert stdout == ""
    assert f"refusing to write {out}: it already exists" in err
    assert [p.name for p in work.iterdir()] == ["exists.jsonl"]


@pytest.mark.parametrize("name", ["new-dir", "exists.jsonl"])
def test_salvage_refuses_a_new_path_that_names_a_directory(
    name: str, capsys: pytest.CaptureFixture[str], completed: Path, work: Path
) -> None:
    (work / "exists.jsonl").write_bytes(b"precious")
    out = f"{work / name}{os.sep}"

    code, stdout, err = _salvage(capsys, completed, out)

    assert code == 2
    assert stdout == ""
    assert f"refusing to write {out}: it names a directory" in err
    assert [p.name for p in work.iterdir()] == ["exists.jsonl"]
    assert (work / "exists.jsonl").read_bytes() == b"precious"


def test_salvage_refuses_a_dangling_symlink(
    capsys: pytest.CaptureFixture[str], completed: Path, work: Path
) -> None:
    out = work / "link.jsonl"
    out.symlink_to(work / "elsewhere.jsonl")

    code, _, err = _salvage(capsys, completed, out)

    assert code == 2
    assert "already exists" in err
    assert not (work / "elsewhere.jsonl").exists()


@pytest.mark.parametrize("spelling", ["same", "dot"])
def test_salvage_refuses_to_write_the_file_itself(
    capsys: pytest.CaptureFixture[str], completed: Path, spelling: str
) -> None:
    replace_line(completed, 4, b"garbage")
    out = completed if spelling == "same" else completed.parent / "." / completed.name

    code, _, err = _salvage(capsys, completed, out, "--json")  # `untouched` checks FILE

    assert code == 2
    assert "itself: salvage never changes FILE in place" in err


@pytest.mark.parametrize("fixture", corrupt_fixtures(header=True), ids=lambda p: p.stem)
def test_salvage_of_an_invalid_header_writes_nothing(
    capsys: pytest.CaptureFixture[str], fixture: Path, work: Path
) -> None:
    out = work / "new.jsonl"

    code, stdout, err = _salvage(capsys, fixture, out, "--json")

    assert code == 3
    assert "line 1" in err
    assert "nothing in the file can be salvaged" in err
    assert json.loads(stdout)["error"]["line"] == 1
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("fixture", not_a_session_fixtures(), ids=lambda p: p.stem)
def test_salvage_of_not_a_session_writes_nothing(
    capsys: pytest.CaptureFixture[str], fixture: Path, work: Path
) -> None:
    code, stdout, err = _salvage(capsys, fixture, work / "new.jsonl", "--json")

    assert code == 4
    assert "is not a tiny-agent-nb session" in err
    assert "Nothing was written" in err
    assert json.loads(stdout)["error"]["type"] == "NotASessionError"
    assert list(work.iterdir()) == []


def test_salvage_of_a_missing_file(capsys: pytest.CaptureFixture[str], work: Path) -> None:
    code, _, err = cli(capsys, "salvage", str(work / "nope.jsonl"), "--out", str(work / "n"))

    assert code == 4
    assert "cannot read" in err
    assert list(work.iterdir()) == []


def test_salvage_into_a_missing_directory_exits_5(
    capsys: pytest.CaptureFixture[str], completed: Path, work: Path
) -> None:
    out = work / "no" / "such" / "dir.jsonl"

    code, _, err = _salvage(capsys, completed, out)

    assert code == 5
    assert f"cannot write {out}" in err
    assert list(work.iterdir()) == []


def test_salvage_function_accounts_for_every_byte() -> None:
    header = (FIXTURES / "header-only.jsonl").read_bytes()
    data = header + b"oops\n\n{}\n" + b'{"partial'

    result = salvage(data, "mem.jsonl")

    assert result.data == header
    assert (result.lines, result.transactions) == (1, 0)
    assert (result.bad_line, result.bad_line_bytes) == (2, 5)
    assert (result.lines_after, result.bytes_after) == (2, 4)  # the blank line and `{}`
    assert result.torn_tail_bytes == len(b'{"partial')
    assert result.kept_bytes + result.left_behind_bytes == len(data)
    assert not result.complete


def test_salvage_function_on_a_valid_file_keeps_every_line() -> None:
    data = (FIXTURES / "completed-run.jsonl").read_bytes()

    result = salvage(data, "mem.jsonl")

    assert result.data == data
    assert result.complete
    assert result.left_behind_bytes == 0
