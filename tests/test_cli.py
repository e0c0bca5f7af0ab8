"""`tiny-agent-nb`: inspect, timeline and usage read any file and never change it;
salvage copies the longest loadable prefix of a damaged file into a new one."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.cli import COMMANDS, main
from tiny_agent_nb.session import (
    HeaderInit,
    SessionCorruptError,
    SessionStore,
    load_session,
    salvage,
)
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.timeline import PAGE_SIZE, ROWS_PER_RUN

from scenario import BASH, READ_FILE, Run, complete_run

FIXTURES = Path(__file__).resolve().parent.parent / "schemas" / "session" / "fixtures"
TORN = b'{"kind":"entry","seq":9,"id":"0190'


# ---------------------------------------------------------------- helpers


@contextmanager
def untouched(path: Path) -> Iterator[None]:
    """Fails unless the file's bytes and mtime are the same after the block."""
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    yield
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime


def inspect(capsys: pytest.CaptureFixture[str], path: Path, *flags: str) -> tuple[int, str, str]:
    if path.exists():
        with untouched(path):
            code = main(["inspect", str(path), *flags])
    else:
        code = main(["inspect", str(path), *flags])
        assert not path.exists(), "inspect must never create the file"
    out, err = capsys.readouterr()
    return code, out, err


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real thing: a fresh interpreter, `python -m tiny_agent_nb ...`."""
    return subprocess.run(
        [sys.executable, "-m", "tiny_agent_nb", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
        timeout=60,
    )


def replace_line(path: Path, lineno: int, new: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[lineno - 1] = new
    path.write_bytes(b"\n".join(lines))


@pytest.fixture
def completed(store: SessionStore, session_path: Path) -> Path:
    complete_run(store)
    return session_path


@pytest.fixture
def killed_during_bash(store: SessionStore, session_path: Path) -> Path:
    """The kernel died after committing the bash intent, before its result."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Deploy"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("call_1", "bash", {"command": "./deploy.sh"})], cost=None))
    store.commit([run.intent("call_1", BASH, {"command": "./deploy.sh"})])
    return session_path


# ---------------------------------------------------------------- valid sessions


def test_completed_run_reports_operation_status_and_cost(
    capsys: pytest.CaptureFixture[str], completed: Path
) -> None:
    code, out, err = inspect(capsys, completed)
    state = load_session(completed)

    assert code == 0
    assert err == ""
    assert state.header.id in out
    (operation,) = state.operations.values()
    assert f"    {operation.id}  run     completed" in out
    assert "cost $0.002" in out  # two attempts at $0.001
    assert "read_file  re-read after a crash  completed" in out
    assert f"transactions {state.transaction_count} (lastSeq {state.last_seq})" in out
    assert "attempts     2 (2 settled)" in out
    assert "the kernel stopped" not in out
    assert "pending" not in out
    assert "torn tail" not in out


def test_created_at_is_an_iso_time(
    capsys: pytest.CaptureFixture[str], session_path: Path, header_init: HeaderInit
) -> None:
    with SessionStore.open(session_path, create=header_init, clock=lambda: 1787371200000):
        pass

    code, out, _ = inspect(capsys, session_path)

    assert code == 0
    assert "created at   2026-08-22T04:00:00.000Z" in out
    assert "runs         0" in out
    assert "cost $0.00" in out


def test_killed_during_bash_calls_out_open_run_and_pending_intent(
    capsys: pytest.CaptureFixture[str], killed_during_bash: Path
) -> None:
    code, out, _ = inspect(capsys, killed_during_bash)

    assert code == 0
    assert "open — the kernel stopped during this run" in out
    never = f"{'never re-run':<21}"  # the replay policy `never`, in the glossary's words
    assert f"bash  {never}  pending — effect may have happened; not re-run" in out
    assert '{"command": "./deploy.sh"}' in out
    assert "cost unknown" in out


def test_pending_safe_read_is_not_said_to_be_never_rerun(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path
) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Read it"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("call_1", "read_file", {"path": "a.txt"})]))
    store.commit([run.intent("call_1", READ_FILE, {"path": "a.txt"})])

    code, out, _ = inspect(capsys, session_path)

    assert code == 0
    assert "pending — read-only; replayed on resume" in out
    assert "not re-run" not in out


def test_partly_priced_usage_says_the_cost_is_a_lower_bound(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path
) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Hi"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("call_1", "read_file", {"path": "a"})], cost=None))
    intent = run.intent("call_1", READ_FILE, {"path": "a"})
    store.commit([intent])
    store.commit([run.result(intent, "a")])
    store.commit(run.attempt())
    store.commit(run.answer("Done.", cost=0.5))

    _, out, _ = inspect(capsys, session_path)

    assert "cost at least $0.50 (1 of 2 usage records have no cost)" in out


def test_json_is_the_summary(capsys: pytest.CaptureFixture[str], killed_during_bash: Path) -> None:
    code, out, err = inspect(capsys, killed_during_bash, "--json")

    assert code == 0
    assert err == ""
    assert json.loads(out) == {"summary": load_session(killed_during_bash).summary()}
    assert out.startswith('{\n "summary": {\n  "sessionId"')  # indent 1, like the fixtures


def test_inspect_while_a_writer_holds_the_file(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path
) -> None:
    complete_run(store)  # `store` is still open: it holds the OS lock

    code, _, _ = inspect(capsys, session_path)

    assert code == 0
    complete_run(store)  # and the writer carries on unaffected
    assert load_session(session_path).summary()["operations"][1]["status"] == "completed"


def test_control_characters_from_the_file_are_escaped(
    capsys: pytest.CaptureFixture[str], session_path: Path, tmp_path: Path
) -> None:
    init = HeaderInit(
        cwd="/tmp/\x1b[2Jevil", provider="p", model="m", environment_identity=str(tmp_path)
    )
    SessionStore.open(session_path, create=init).close()

    _, out, _ = inspect(capsys, session_path)

    assert "\x1b" not in out
    assert "/tmp/\\x1b[2Jevil" in out


# ---------------------------------------------------------------- torn tail


def test_torn_tail_is_reported_and_left_in_place(
    capsys: pytest.CaptureFixture[str], completed: Path
) -> None:
    with completed.open("ab") as file:
        file.write(TORN)
    before = completed.read_bytes()

    code, out, _ = inspect(capsys, completed)

    assert code == 0
    assert (
        f"{len(TORN)} bytes after the last complete line (a write cut short by a crash); "
        "ignored, a writer will cut them on open"
    ) in out
    assert completed.read_bytes() == before


def test_torn_tail_in_json(capsys: pytest.CaptureFixture[str], completed: Path) -> None:
    with completed.open("ab") as file:
        file.write(TORN)

    code, out, _ = inspect(capsys, completed, "--json")

    assert code == 0
    assert json.loads(out)["summary"]["tornTailBytes"] == len(TORN)


# ---------------------------------------------------------------- corruption


def test_corrupt_middle_line_names_file_and_line(
    capsys: pytest.CaptureFixture[str], completed: Path
) -> None:
    replace_line(completed, 4, b'{"kind":"record","seq":')

    code, out, err = inspect(capsys, completed)

    assert code == 3
    assert out == ""
    # The file's line, and the position inside it, each said as what it is.
    assert f"line 4 of {completed} is damaged: invalid JSON at character 23 (" in err
    assert "line 1 column" not in err
    assert "not modified" in err
    assert f"tiny-agent-nb salvage {completed} --out NEW.jsonl" in err
    assert "%agent session NEW.jsonl" in err


def test_broken_invariant_is_corruption_in_json(
    capsys: pytest.CaptureFixture[str], completed: Path
) -> None:
    lines = completed.read_bytes().split(b"\n")
    lines.insert(3, lines[2])  # line 3 again as line 4: its seq repeats
    completed.write_bytes(b"\n".join(lines))

    code, out, err = inspect(capsys, completed, "--json")

    assert code == 3
    error = json.loads(out)["error"]
    assert error["type"] == "SessionCorruptError"
    assert error["line"] == 4
    assert error["reason"]
    assert error["reason"] in err
    assert "line 4" in err


def test_invalid_header_is_corruption_at_line_1(
    capsys: pytest.CaptureFixture[str], session_path: Path
) -> None:
    session_path.write_bytes(b'{"kind":"header","version":2}\n')

    code, _, err = inspect(capsys, session_path)

    assert code == 3
    assert "line 1" in err
    assert "header" in err


# ---------------------------------------------------------------- not a session


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

    code, out, err = inspect(capsys, session_path, "--json")

    assert code == 4
    assert "is not a tiny-agent-nb session" in err
    assert reason in err
    error = json.loads(out)["error"]
    assert error["type"] == "NotASessionError"
    assert reason in error["reason"]


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"

    code, out, err = inspect(capsys, missing)

    assert code == 4
    assert out == ""
    assert f"cannot read {missing}" in err


def test_missing_file_in_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = inspect(capsys, tmp_path / "nope.jsonl", "--json")

    assert code == 4
    assert json.loads(out)["error"]["type"] == "FileNotFoundError"


def test_directory_is_not_a_session(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["inspect", str(tmp_path)])
    err = capsys.readouterr().err

    assert code == 4
    assert "is not a tiny-agent-nb session: it is a directory" in err


def run_cli_capped(*args: str) -> subprocess.CompletedProcess[str]:
    """run_cli with a deadline and a memory cap: on the base code `inspect FIFO` waited for
    a writer forever and `inspect /dev/zero` read until memory ran out."""
    cap = "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))"
    run = "sys.argv[0] = 'tiny-agent-nb'; runpy.run_module('tiny_agent_nb', run_name='__main__')"
    return subprocess.run(
        [sys.executable, "-c", f"{cap}; {run}", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
        timeout=30,
    )


@pytest.mark.parametrize("command", ["inspect", "timeline", "usage", "salvage"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dev-null"])
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

    result = run_cli_capped(command, target, *extra, "--json")

    assert result.returncode == 4, result.stderr[-2000:]
    assert f"is not a tiny-agent-nb session: it is {what}" in result.stderr
    assert json.loads(result.stdout)["error"]["type"] == "NotASessionError"
    assert not out.exists()


# ---------------------------------------------------------------- usage


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
    with pytest.raises(SystemExit) as exc_info:
        main(argv)

    assert exc_info.value.code == 2
    assert "usage: tiny-agent-nb" in capsys.readouterr().err


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc_info:
        main(["--help"])

    assert exc_info.value.code == 0
    out = capsys.readouterr().out
    # each command's own row: its name, then its help text (the names alone also occur
    # in the usage line and in other commands' help)
    listed = re.findall(r"^    (\w+)\s{2,}\S", out, re.MULTILINE)
    assert listed == ["demo", "inspect", "timeline", "usage", "salvage"] == list(COMMANDS)


# ---------------------------------------------------------------- as a real process


def test_process_valid_session_exits_0(completed: Path) -> None:
    with untouched(completed):
        result = run_cli("inspect", str(completed), "--json")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"summary": load_session(completed).summary()}


def test_process_human_report_exits_0(killed_during_bash: Path) -> None:
    with untouched(killed_during_bash):
        result = run_cli("inspect", str(killed_during_bash))

    assert result.returncode == 0, result.stderr
    assert "open — the kernel stopped during this run" in result.stdout


def test_process_corrupt_exits_3(completed: Path) -> None:
    replace_line(completed, 5, b"garbage")

    with untouched(completed):
        result = run_cli("inspect", str(completed))

    assert result.returncode == 3
    assert f"line 5 of {completed} is damaged" in result.stderr
    assert "Traceback" not in result.stderr


def test_process_empty_file_exits_4(session_path: Path) -> None:
    session_path.write_bytes(b"")

    with untouched(session_path):
        result = run_cli("inspect", str(session_path), "--json")

    assert result.returncode == 4
    assert json.loads(result.stdout)["error"]["type"] == "NotASessionError"
    assert "Traceback" not in result.stderr


def test_process_missing_file_exits_4(tmp_path: Path) -> None:
    result = run_cli("inspect", str(tmp_path / "nope.jsonl"))

    assert result.returncode == 4
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "nope.jsonl").exists()


def test_process_bad_usage_exits_2() -> None:
    result = run_cli("inspect")

    assert result.returncode == 2
    assert "usage: tiny-agent-nb" in result.stderr


# ---------------------------------------------------------------- conformance fixtures


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*.jsonl"))


@pytest.mark.parametrize("fixture", _fixtures(), ids=lambda p: p.stem)
def test_fixture_json_matches_expected(capsys: pytest.CaptureFixture[str], fixture: Path) -> None:
    expected: dict[str, Any] = json.loads(fixture.with_suffix(".expected.json").read_text("utf-8"))

    code, out, _ = inspect(capsys, fixture, "--json")
    got = json.loads(out)

    if "summary" in expected:
        assert code == 0
        assert got == expected
    else:
        assert code in (3, 4)
        assert expected["error"].items() <= got["error"].items()


def test_process_runs_from_any_directory(tmp_path: Path) -> None:
    # `python -m` must work from any cwd: the package is installed, not found via cwd.
    result = subprocess.run(
        [sys.executable, "-m", "tiny_agent_nb", "--version"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=60,
    )
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
        result = subprocess.run(
            [sys.executable, "-m", "tiny_agent_nb", command, str(completed), *flags],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")


def test_head_of_a_long_timeline_is_just_its_first_lines(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    init = HeaderInit(cwd="/w", provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        for n in range(120):
            complete_run(store, f"prompt {n}")
    # About 140 kB of JSON: more than a pipe holds, so the CLI is still writing when
    # head has its two lines and exits.
    cli = f"{shlex.quote(sys.executable)} -m tiny_agent_nb timeline --all --json {path}"
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{cli} | head -n 2"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.stdout.splitlines() == ["{", ' "timeline": {']
    assert (result.returncode, result.stderr) == (141, "")


# ---------------------------------------------------------------- shared by the new commands


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def start_and_finish(store: SessionStore, prompt: str, outcome: str = "completed") -> Run:
    """The smallest run: user+runStarted, then operationFinished (no attempt)."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start(prompt))
    store.commit(run.finish(outcome))
    return run


@pytest.fixture
def three_runs(store: SessionStore, session_path: Path) -> Path:
    """A completed run, a failed run (a 401, usage of unknown cost), and an open run with
    a pending bash intent (the kernel died)."""
    complete_run(store, "List the files")
    failed = Run(environment=store.header.environmentIdentity)
    store.commit(failed.start("Summarize the log"))
    store.commit(failed.attempt())
    assert failed.attempt_id is not None
    store.commit(
        [
            f.attempt_failed(
                failed.attempt_id, kind="http", message="401 bad key", retryable=False
            ),
            f.usage(attempt_id=failed.attempt_id, input_tokens=7, output_tokens=0, cost=None),
        ]
    )
    store.commit([f.operation_finished(failed.operation_id, "failed", detail="401 bad key")])
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Deploy"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("call_1", "bash", {"command": "./deploy.sh"})], cost=None))
    store.commit([run.intent("call_1", BASH, {"command": "./deploy.sh"})])
    return session_path


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

    expected = inspect(capsys, completed, *json_flag)
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


# ---------------------------------------------------------------- timeline


def test_timeline_shows_every_run_with_its_status(
    capsys: pytest.CaptureFixture[str], three_runs: Path
) -> None:
    with untouched(three_runs):
        code, out, err = cli(capsys, "timeline", str(three_runs))

    assert code == 0
    assert err == ""
    assert "3 run(s), 4 attempt(s), 2 tool call(s)" in out
    runs = [line for line in out.splitlines() if line[:1].isalpha() and " run " in line]
    assert [line.split()[0] for line in runs] == ["completed", "failed", "open"]
    assert "List the files" in runs[0]
    assert "401 bad key" in out  # the operation's detail and the attempt's error
    assert "attempt 1.1 failed" in out
    assert "tool    completed   read_file" in out
    assert 'tool    pending     bash command="./deploy.sh"' in out
    assert "OFFLINE DEMO" not in out
    assert "\x1b" not in out  # captured stdout is no terminal


def test_timeline_json_is_the_timeline_model(
    capsys: pytest.CaptureFixture[str], three_runs: Path
) -> None:
    code, out, _ = cli(capsys, "timeline", str(three_runs), "--json")

    assert code == 0
    timeline = json.loads(out)["timeline"]
    state = load_session(three_runs)
    assert timeline["sessionId"] == state.header.id
    assert (timeline["page"], timeline["pages"]) == (1, 1)
    assert [r["status"] for r in timeline["runs"]] == ["completed", "failed", "open"]
    assert [r["id"] for r in timeline["runs"]] == list(state.operations)
    first = timeline["runs"][0]
    assert first["prompt"] == "List the files"
    assert [a["status"] for a in first["attempts"]] == ["settled", "settled"]
    assert first["tools"][0]["name"] == "read_file"
    assert first["tools"][0]["replayPolicy"] == "safeRead"
    assert timeline["runs"][2]["tools"][0]["status"] == "pending"
    totals = timeline["totals"]
    assert totals["inputTokens"] == state.totals.input_tokens
    assert totals["cost"] == state.totals.known_cost
    assert totals["unpriced"] == state.totals.unpriced


@pytest.fixture
def many_runs(store: SessionStore, session_path: Path) -> Path:
    """PAGE_SIZE + 3 runs, `task-001` ... : two pages."""
    for n in range(1, PAGE_SIZE + 4):
        start_and_finish(store, f"task-{n:03}")
    return session_path


def _prompts(out: str) -> list[str]:
    return [word for line in out.splitlines() for word in line.split() if word.startswith("task-")]


def test_timeline_shows_the_last_page_by_default(
    capsys: pytest.CaptureFixture[str], many_runs: Path
) -> None:
    code, out, _ = cli(capsys, "timeline", str(many_runs))

    assert code == 0
    assert f"{PAGE_SIZE + 3} run(s)" in out
    assert "page 2 of 2" in out
    assert _prompts(out) == [f"task-{n:03}" for n in range(PAGE_SIZE + 1, PAGE_SIZE + 4)]


def test_timeline_page_1_is_the_oldest(capsys: pytest.CaptureFixture[str], many_runs: Path) -> None:
    code, out, _ = cli(capsys, "timeline", str(many_runs), "--page", "1")

    assert code == 0
    assert "page 1 of 2" in out
    assert _prompts(out) == [f"task-{n:03}" for n in range(1, PAGE_SIZE + 1)]

    _, out, _ = cli(capsys, "timeline", str(many_runs), "--page", "1", "--json")
    timeline = json.loads(out)["timeline"]
    assert (timeline["page"], timeline["pages"]) == (1, 2)
    assert len(timeline["runs"]) == PAGE_SIZE


def test_timeline_all_shows_every_run(capsys: pytest.CaptureFixture[str], many_runs: Path) -> None:
    code, out, _ = cli(capsys, "timeline", str(many_runs), "--all")

    assert code == 0
    assert _prompts(out) == [f"task-{n:03}" for n in range(1, PAGE_SIZE + 4)]
    assert "page" not in out


def test_timeline_page_out_of_range_exits_2(
    capsys: pytest.CaptureFixture[str], many_runs: Path
) -> None:
    code, out, err = cli(capsys, "timeline", str(many_runs), "--page", "3")

    assert code == 2
    assert out == ""
    assert "there is no page 3" in err
    assert "2 page(s)" in err


def test_timeline_of_an_empty_session(
    capsys: pytest.CaptureFixture[str], store: SessionStore
) -> None:
    code, out, _ = cli(capsys, "timeline", str(store.path), "--page", "1")

    assert code == 0
    assert "0 run(s)" in out


def test_timeline_says_when_the_model_is_the_offline_demo(
    capsys: pytest.CaptureFixture[str], session_path: Path, tmp_path: Path
) -> None:
    init = HeaderInit(
        cwd=str(tmp_path), provider="offline-demo", model="demo", environment_identity=str(tmp_path)
    )
    with SessionStore.open(session_path, create=init) as store:
        start_and_finish(store, "Hi")

    _, out, _ = cli(capsys, "timeline", str(session_path))

    assert "OFFLINE DEMO MODEL (scripted, not a real LLM)" in out


def test_timeline_escapes_control_characters_from_the_file(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path
) -> None:
    start_and_finish(store, "clear \x1b[2J the\nscreen\x9b31m")

    _, out, _ = cli(capsys, "timeline", str(session_path))

    assert "\x1b" not in out
    assert "\x9b" not in out
    assert "clear \\x1b[2J the screen\\x9b31m" in out


def test_timeline_json_escapes_every_control_and_bidi_character_from_the_file(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path
) -> None:
    """json.dumps escapes only C0: the C1 CSI, DEL and a bidi override must not reach a
    terminal raw either, and the JSON still reads back as the file's text."""
    prompt = "x\x9b2J\x7f\u202eevil \U000e0001 中文"
    start_and_finish(store, prompt)

    _, out, _ = cli(capsys, "timeline", str(session_path), "--json")

    assert all(c.isprintable() or c == "\n" for c in out)
    assert "中文" in out  # readable text stays as it is
    assert prompt in json.dumps(json.loads(out), ensure_ascii=False)


def test_timeline_reports_the_torn_tail(
    capsys: pytest.CaptureFixture[str], completed: Path
) -> None:
    with completed.open("ab") as file:
        file.write(TORN)

    with untouched(completed):
        code, out, _ = cli(capsys, "timeline", str(completed))

    assert code == 0
    assert f"{len(TORN)} torn bytes" in out


def run_on_tty(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """`python -m tiny_agent_nb ...` with stdout on a pseudo-terminal."""
    master, slave = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-m", "tiny_agent_nb", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.DEVNULL,
        env=env,
    ) as process:
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        code = process.wait(timeout=60)
    os.close(master)
    return code, b"".join(chunks).decode("utf-8")


def _env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    env["TERM"] = "xterm-256color"
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def test_timeline_colours_only_a_terminal(three_runs: Path) -> None:
    piped = subprocess.run(
        [sys.executable, "-m", "tiny_agent_nb", "timeline", str(three_runs)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
        timeout=60,
        env=_env(),
    )
    code, on_tty = run_on_tty("timeline", str(three_runs), env=_env())

    assert piped.returncode == 0, piped.stderr
    assert "\x1b" not in piped.stdout
    assert code == 0
    assert "\x1b[32mcompleted  \x1b[0m" in on_tty
    assert "\x1b[34mpending    \x1b[0m" in on_tty
    # Same text once the colours are taken out (a terminal turns LF into CRLF).
    plain = on_tty.replace("\r\n", "\n")
    for code_ in ("32", "31", "34", "0"):
        plain = plain.replace(f"\x1b[{code_}m", "")
    assert plain == piped.stdout


@pytest.mark.parametrize(
    "env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}], ids=["NO_COLOR", "TERM=dumb"]
)
def test_timeline_on_a_terminal_without_colour(three_runs: Path, env: dict[str, str]) -> None:
    code, out = run_on_tty("timeline", str(three_runs), env=_env(**env))

    assert code == 0
    assert "completed" in out
    assert "\x1b" not in out


def test_empty_no_color_does_not_disable_colour(three_runs: Path) -> None:
    # no-color.org: NO_COLOR counts only when it is set to a non-empty string.
    code, out = run_on_tty("timeline", str(three_runs), env=_env(NO_COLOR=""))

    assert code == 0
    assert "\x1b[32m" in out


# ---------------------------------------------------------------- usage


def _usage(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    with untouched(path):
        code, out, err = cli(capsys, "usage", str(path), "--json")
    assert (code, err) == (0, "")
    usage: dict[str, Any] = json.loads(out)["usage"]
    return usage


TOKEN_KEYS = ("inputTokens", "outputTokens", "reasoningTokens", "cachedInputTokens")


def test_usage_totals_are_the_session_totals(
    capsys: pytest.CaptureFixture[str], three_runs: Path
) -> None:
    usage = _usage(capsys, three_runs)
    state = load_session(three_runs)

    totals = usage["totals"]
    assert {k: totals[k] for k in (*TOKEN_KEYS, "cost")} == state.summary()["usage"]
    assert totals["usageRecords"] == state.totals.priced + state.totals.unpriced
    for key in TOKEN_KEYS:
        assert sum(r[key] for r in usage["runs"]) == totals[key]
    assert [(r["kind"], r["status"]) for r in usage["runs"]] == [
        ("run", "completed"),
        ("run", "failed"),
        ("run", "open"),
    ]
    costs = [r["cost"] for r in usage["runs"]]
    assert costs == [0.002, None, None]  # unknown stays null, never 0
    assert totals["cost"] == 0.002
    assert totals["unpricedRecords"] == 2


def test_usage_table_says_unknown_not_zero(
    capsys: pytest.CaptureFixture[str], three_runs: Path
) -> None:
    with untouched(three_runs):
        code, out, _ = cli(capsys, "usage", str(three_runs))

    assert code == 0
    rows = {line.split()[2]: line for line in out.splitlines() if line[:1].isdigit()}
    assert set(rows) == {"completed", "failed", "open"}
    assert rows["completed"].split()[3:8] == ["200", "20", "0", "0", "$0.002"]
    assert rows["failed"].split()[3:8] == ["7", "0", "0", "0", "unknown"]
    assert rows["open"].split()[7] == "unknown"
    assert "$0.00 " not in out and "$0 " not in out
    total = next(line for line in out.splitlines() if line.split()[:1] == ["total"])
    assert total.split()[1:7] == ["307", "30", "0", "0", "at", "least"]
    assert total.split()[7] == "$0.002"
    assert "total cost   at least $0.002 (2 of 4 usage records have no cost)" in out
    assert "not counted as $0" in out


def test_usage_counts_tool_usage_in_its_run(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = FIXTURES / "usage-ledger.jsonl"
    expected = json.loads(fixture.with_suffix(".expected.json").read_text("utf-8"))

    usage = _usage(capsys, fixture)

    totals = usage["totals"]
    assert {k: totals[k] for k in (*TOKEN_KEYS, "cost")} == expected["summary"]["usage"]
    first, second, third = usage["runs"]
    # attempt $0.1 + web_search tool $0.2, plus an attempt of unknown cost: a lower bound
    assert first["cost"] == pytest.approx(0.3)
    assert (first["usageRecords"], first["unpricedRecords"]) == (3, 1)
    assert second["cost"] == pytest.approx(0.0000423)  # the billed failed attempt counts
    assert third["cost"] is None


def test_usage_of_only_unpriced_records_is_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = FIXTURES / "usage-cost-unknown.jsonl"

    assert _usage(capsys, fixture)["totals"]["cost"] is None
    _, out, _ = cli(capsys, "usage", str(fixture))
    assert "total cost   unknown (the provider reported no cost)" in out
    assert "$0" not in out.replace("(not counted as $0)", "")


def test_usage_notes_an_attempt_in_flight(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = FIXTURES / "pending-attempt.jsonl"

    usage = _usage(capsys, fixture)
    _, out, _ = cli(capsys, "usage", str(fixture))

    assert usage["runs"][0]["unreportedAttempts"] == 1
    assert "1 attempt(s) still pending, with no usage record" in out


def test_usage_of_an_empty_session(capsys: pytest.CaptureFixture[str], store: SessionStore) -> None:
    usage = _usage(capsys, store.path)

    assert usage["runs"] == []
    assert usage["totals"]["cost"] == 0


# ---------------------------------------------------------------- salvage


def _corrupt_fixtures(*, header: bool = False) -> list[Path]:
    found = []
    for fixture in _fixtures():
        expected = json.loads(fixture.with_suffix(".expected.json").read_text("utf-8"))
        error = expected.get("error", {})
        if error.get("type") == "SessionCorruptError" and (error["line"] == 1) == header:
            found.append(fixture)
    return found


def _not_a_session_fixtures() -> list[Path]:
    return [
        p
        for p in _fixtures()
        if '"NotASessionError"' in p.with_suffix(".expected.json").read_text("utf-8")
    ]


def _salvage(
    capsys: pytest.CaptureFixture[str], source: Path, out: Path, *flags: str
) -> tuple[int, str, str]:
    with untouched(source):
        return cli(capsys, "salvage", str(source), "--out", str(out), *flags)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    directory.mkdir()
    return directory


def test_there_are_corrupt_fixtures_to_salvage() -> None:
    assert len(_corrupt_fixtures()) >= 30
    assert len(_corrupt_fixtures(header=True)) >= 2
    assert len(_not_a_session_fixtures()) >= 3


@pytest.mark.parametrize("fixture", _corrupt_fixtures(), ids=lambda p: p.stem)
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


@pytest.mark.parametrize("fixture", _corrupt_fixtures(header=True), ids=lambda p: p.stem)
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


@pytest.mark.parametrize("fixture", _not_a_session_fixtures(), ids=lambda p: p.stem)
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


def test_salvage_as_a_process(completed: Path, work: Path) -> None:
    replace_line(completed, 6, b"[]")
    out = work / "new.jsonl"

    with untouched(completed):
        result = run_cli("salvage", str(completed), "--out", str(out))

    assert result.returncode == 0, result.stderr
    assert "left behind  line 6" in result.stdout
    assert load_session(out).transaction_count == 4


# ---------------------------------------------------------------- salvage(): the pure core


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


def test_timeline_says_which_rows_it_left_out(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path
) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Keep retrying"))
    for n in range(1, ROWS_PER_RUN + 3):
        store.commit(run.attempt(n))
        assert run.attempt_id is not None
        store.commit(
            [f.attempt_failed(run.attempt_id, kind="timeout", message="slow", retryable=True)]
        )

    code, out, _ = cli(capsys, "timeline", str(session_path))

    assert code == 0
    assert out.count("attempt 1.") == ROWS_PER_RUN
    assert f"attempt 1.{ROWS_PER_RUN + 2} failed" in out
    assert f"only the latest {ROWS_PER_RUN} attempts" in out
    assert f"{run.operation_id}: 2 earlier attempt(s), 0 earlier tool call(s)" in out
