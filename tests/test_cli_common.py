"""What every `tiny-agent-nb` command shares: reading errors (a file that is no session,
missing, a FIFO or a device), bad usage and help, exit statuses as a real process, a
reader that went away (141)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_agent_nb.cli import main
from tiny_agent_nb.cli._parser import COMMANDS

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


# On the base code `inspect FIFO` waited for a writer forever and `inspect /dev/zero` read
# until memory ran out: each command with one kind, each kind with a command, salvage (which
# reads through its own path) with the two that would block or never end, all in one child
# under a 2 GiB address-space cap and a deadline (a process costs ~0.4 s of CPU; the exit
# status a process returns is main's, tested as a process below).
# Every kind with every opener is tested in tests/test_session_paths.py, without a CLI.
REFUSED = [
    ("inspect", "fifo"),
    ("timeline", "dev-zero"),
    ("usage", "dev-null"),
    ("salvage", "fifo"),
    ("salvage", "dev-zero"),
]
CAPPED_CLI = """
import contextlib, io, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from tiny_agent_nb.cli import main
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    print(json.dumps([code, out.getvalue(), err.getvalue()]))
"""


def test_fifos_and_devices_are_refused_at_once_with_exit_4(tmp_path: Path) -> None:
    cases = []
    for command, kind in REFUSED:
        if kind == "fifo":
            target = str(tmp_path / f"{command}.jsonl")
            os.mkfifo(target)
            what = "a FIFO (named pipe)"
        else:
            target = "/dev/zero" if kind == "dev-zero" else "/dev/null"
            what = "a character device"
        out = tmp_path / f"{command}-{kind}-copy.jsonl"
        extra = ["--out", str(out)] if command == "salvage" else []
        cases.append(([command, target, *extra, "--json"], what, out))

    child = subprocess.run(
        [sys.executable, "-c", CAPPED_CLI, json.dumps([argv for argv, _, _ in cases])],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert child.returncode == 0, child.stderr[-2000:]
    answers = [json.loads(line) for line in child.stdout.splitlines()]
    assert len(answers) == len(cases), child.stdout
    for (argv, what, out), (code, stdout, stderr) in zip(cases, answers, strict=True):
        assert code == 4, (argv, stderr[-2000:])
        assert f"is not a tiny-agent-nb session: it is {what}" in stderr, argv
        assert json.loads(stdout)["error"]["type"] == "NotASessionError", argv
        assert not out.exists(), argv


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
    assert (
        listed
        == [
            "demo",
            "inspect",
            "timeline",
            "usage",
            "salvage",
            "fork",
            "rewind",
        ]
        == list(COMMANDS)
    )


# As a process: the status `python -m tiny_agent_nb` exits with is main's (a failure, and
# --version from another directory). Every other status is main's, tested in this process:
# a valid session and the human report (tests/test_cli_inspect.py), an empty, missing or
# unusable file and bad usage (above).
def test_process_corrupt_exits_3(completed: Path) -> None:
    replace_line(completed, 5, b"garbage")

    with untouched(completed):
        result = cli_process("inspect", str(completed))

    assert result.returncode == 3
    assert f"line 5 of {completed} is damaged" in result.stderr
    assert "Traceback" not in result.stderr


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
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    completed: Path,
    argv: list[str],
) -> None:
    """`tiny-agent-nb inspect FILE | head`: head exits before the output is all written.

    In this process, stdout a pipe whose reader is gone; a real process in a real
    pipeline is tests/test_cli_timeline.py's `head` test."""
    command, *flags = argv
    if flags == ["--out"]:
        flags = ["--out", str(tmp_path / "copy.jsonl")]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte: EPIPE every time
    with open(write_end, "w", encoding="utf-8") as closed_pipe:
        monkeypatch.setattr(sys, "stdout", closed_pipe)
        code = main([command, str(completed), *flags])
        monkeypatch.undo()
        # What is still buffered goes nowhere: closing (as the interpreter does at exit)
        # raises no BrokenPipeError ("Exception ignored ..." on a process's stderr).
    assert (code, capsys.readouterr().err) == (141, "")


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
