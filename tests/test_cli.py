"""`tiny-agent-nb inspect`: reads any file, reports what it holds, never changes it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.cli import COMMANDS, main
from tiny_agent_nb.session import HeaderInit, SessionStore, load_session

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
    assert "completed" in out
    assert "cost $0.002" in out  # two attempts at $0.001
    assert "read_file  safeRead  completed" in out
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
    assert "operations   0" in out
    assert "cost $0.00" in out


def test_killed_during_bash_calls_out_open_run_and_pending_intent(
    capsys: pytest.CaptureFixture[str], killed_during_bash: Path
) -> None:
    code, out, _ = inspect(capsys, killed_during_bash)

    assert code == 0
    assert "open — the kernel stopped during this run" in out
    assert "bash  never     pending — effect may have happened; not re-run" in out
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
    assert f"{completed}, line 4:" in err
    assert "Invalid JSON" in err
    assert "not modified" in err


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
    assert "cannot read" in err


# ---------------------------------------------------------------- usage


@pytest.mark.parametrize(
    "argv",
    [[], ["inspect"], ["frobnicate", "x"], ["inspect", "a", "b"], ["inspect", "--yaml", "a"]],
    ids=["nothing", "no-file", "unknown-command", "two-files", "unknown-flag"],
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
    for name in COMMANDS:
        assert name in out


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
    assert f"{completed}, line 5:" in result.stderr
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
