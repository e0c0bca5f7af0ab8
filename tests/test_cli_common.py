"""What every `tiny-agent-nb` command shares: reading errors (a file that is no session,
missing, a FIFO or a device), bad usage and help, exit statuses as a real process, a
reader that went away (141)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tiny_agent_nb.cli._parser import COMMANDS
from tiny_agent_nb.session import (
    load_session,
)

from helpers.cli_helpers import (
    cli,
    cli_process,
    replace_line,
    untouched,
)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty"),
        (b'{"kind":"header","ver', "torn"),
        (b"hello, world\n", "not JSON"),
        (b'{"kind":"entry"}\n', "header"),
    ],
    ids=["empty", "torn-header", "text", "no-header"],
)
def test_not_a_session(
    capsys: pytest.CaptureFixture[str], session_path: Path, content: bytes, reason: str
) -> None:
    session_path.write_bytes(content)

    code, out, err = cli(capsys, "inspect", str(session_path), "--json")

    assert code == 4
    assert "is not a tiny-agent-nb session" in err
    assert reason in err
    error = json.loads(out)["error"]
    assert error["type"] == "NotASessionError"
    assert reason in error["reason"]


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"

    code, out, err = cli(capsys, "inspect", str(missing))

    assert code == 4
    assert out == ""
    assert f"cannot read {missing}" in err


def test_missing_file_in_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = cli(capsys, "inspect", str(tmp_path / "nope.jsonl"), "--json")

    assert code == 4
    assert json.loads(out)["error"]["type"] == "FileNotFoundError"


def test_directory_is_not_a_session(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "inspect", str(tmp_path))

    assert code == 4
    assert "is not a tiny-agent-nb session: it is a directory" in err


# Each command with one kind, each kind with a command, salvage (which reads through its
# own path) with the two that would block or never end: a process apiece (~0.4 s of CPU).
# Every kind with every opener is tested in tests/test_session_paths.py, without a CLI.
@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("inspect", "fifo"),
        ("timeline", "dev-zero"),
        ("usage", "dev-null"),
        ("salvage", "fifo"),
        ("salvage", "dev-zero"),
    ],
)
def test_fifos_and_devices_are_refused_at_once_with_exit_4(
    tmp_path: Path, command: str, kind: str
) -> None:
    if kind == "fifo":
        target = str(tmp_path / "session.jsonl")
        os.mkfifo(target)
        what = "a FIFO (named pipe)"
    else:
        target = "/dev/zero" if kind == "dev-zero" else "/dev/null"
        what = "a character device"
    out = tmp_path / "copy.jsonl"
    extra = ["--out", str(out)] if command == "salvage" else []

    result = cli_process(command, target, *extra, "--json", memory_cap=True, timeout=30)

    assert result.returncode == 4, result.stderr[-2000:]
    assert f"is not a tiny-agent-nb session: it is {what}" in result.stderr
    assert json.loads(result.stdout)["error"]["type"] == "NotASessionError"
    assert not out.exists()


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["inspect"],
        ["frobnicate", "x"],
        ["inspect", "a", "b"],
        ["inspect", "--yaml", "a"],
        ["timeline", "a", "--page", "0"],
        ["timeline", "a", "--page", "x"],
        ["timeline", "a", "--page", "1", "--all"],
        ["usage"],
        ["salvage", "a"],
    ],
    ids=[
        "nothing",
        "no-file",
        "unknown-command",
        "two-files",
        "unknown-flag",
        "page-0",
        "page-not-a-number",
        "page-and-all",
        "usage-no-file",
        "salvage-no-out",
    ],
)
def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = cli(capsys, *argv)

    assert code == 2
    assert "usage: tiny-agent-nb" in err


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "--help")

    assert code == 0
    # each command's own row: its name, then its help text (the names alone also occur
    # in the usage line and in other commands' help)
    listed = re.findall(r"^    (\w+)\s{2,}\S", out, re.MULTILINE)
    assert listed == ["demo", "inspect", "timeline", "usage", "salvage"] == list(COMMANDS)


def test_process_valid_session_exits_0(completed: Path) -> None:
    with untouched(completed):
        result = cli_process("inspect", str(completed), "--json")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"summary": load_session(completed).summary()}


def test_process_human_report_exits_0(killed_during_bash: Path) -> None:
    with untouched(killed_during_bash):
        result = cli_process("inspect", str(killed_during_bash))

    assert result.returncode == 0, result.stderr
    assert "open — the kernel stopped during this run" in result.stdout


def test_process_corrupt_exits_3(completed: Path) -> None:
    replace_line(completed, 5, b"garbage")

    with untouched(completed):
        result = cli_process("inspect", str(completed))

    assert result.returncode == 3
    assert f"line 5 of {completed} is damaged" in result.stderr
    assert "Traceback" not in result.stderr


def test_process_empty_file_exits_4(session_path: Path) -> None:
    session_path.write_bytes(b"")

    with untouched(session_path):
        result = cli_process("inspect", str(session_path), "--json")

    assert result.returncode == 4
    assert json.loads(result.stdout)["error"]["type"] == "NotASessionError"
    assert "Traceback" not in result.stderr


def test_process_missing_file_exits_4(tmp_path: Path) -> None:
    result = cli_process("inspect", str(tmp_path / "nope.jsonl"))

    assert result.returncode == 4
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "nope.jsonl").exists()


def test_process_bad_usage_exits_2() -> None:
    result = cli_process("inspect")

    assert result.returncode == 2
    assert "usage: tiny-agent-nb" in result.stderr


def test_process_runs_from_any_directory(tmp_path: Path) -> None:
    # `python -m` must work from any cwd: the package is installed, not found via cwd.
    result = cli_process("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("tiny-agent-nb ")


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect"],
        ["inspect", "--json"],
        ["timeline"],
        ["timeline", "--json"],
        ["usage"],
        ["usage", "--json"],
        ["salvage", "--out"],
    ],
    ids=["inspect", "inspect-json", "timeline", "timeline-json", "usage", "usage-json", "salvage"],
)
def test_a_reader_that_went_away_stops_the_command_quietly_with_141(
    tmp_path: Path, completed: Path, argv: list[str]
) -> None:
    """`tiny-agent-nb inspect FILE | head`: head exits before the output is all written."""
    command, *flags = argv
    if flags == ["--out"]:
        flags = ["--out", str(tmp_path / "copy.jsonl")]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte: EPIPE every time
    try:
        result = cli_process(command, str(completed), *flags, stdout=write_end)
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")


@pytest.mark.parametrize("command", ["timeline", "usage"])
@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize(
    ("content", "code"),
    [(b'{"kind":"header","version":2}\n', 3), (b"", 4), (b"hello\n", 4)],
    ids=["corrupt", "empty", "text"],
)
def test_read_errors_are_those_of_inspect(
    capsys: pytest.CaptureFixture[str],
    completed: Path,
    command: str,
    json_flag: list[str],
    content: bytes,
    code: int,
) -> None:
    if content.startswith(b"{"):
        replace_line(completed, 4, b'{"kind":"record","seq":')
    else:
        completed.write_bytes(content)

    expected = cli(capsys, "inspect", str(completed), *json_flag)
    with untouched(completed):
        got = cli(capsys, command, str(completed), *json_flag)

    assert got == expected
    assert got[0] in (3, 4)


def test_missing_file_is_exit_4_for_every_reader(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for command in ("timeline", "usage"):
        code, out, err = cli(capsys, command, str(tmp_path / "nope.jsonl"))
        assert (code, out) == (4, "")
        assert "cannot read" in err
    assert not (tmp_path / "nope.jsonl").exists()
