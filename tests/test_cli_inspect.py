"""`tiny-agent-nb inspect FILE`: a summary of a session file (runs, attempts, tool calls,
usage, damage) that reads any file and never changes it; its --json is the conformance
fixtures' expected summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.session import (
    HeaderInit,
    SessionStore,
    ToolIdentity,
    load_session,
)

from helpers.cli_helpers import (
    TORN,
    cli,
    replace_line,
    session_fixtures,
)
from helpers.scenario import READ_FILE, Run, complete_run


def test_completed_run_reports_operation_status_and_cost(
    capsys: pytest.CaptureFixture[str], completed: Path
) -> None:
    code, out, err = cli(capsys, "inspect", str(completed))
    state = load_session(completed)

    assert code == 0
    assert err == ""
    assert state.header.id in out
    (operation,) = state.operations.values()
    assert f"    {operation.id}  run completed\n" in out
    assert "cost $0.002" in out  # two attempts at $0.001
    # what happened to the call; its replay policy only matters to a call a crash cut off
    assert "    read_file  completed\n" in out and "re-read" not in out
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

    code, out, _ = cli(capsys, "inspect", str(session_path))

    assert code == 0
    assert "created at   2026-08-22T04:00:00.000Z" in out
    assert "runs         0" in out
    assert "cost $0.00" in out


def test_killed_during_bash_calls_out_open_run_and_pending_intent(
    capsys: pytest.CaptureFixture[str], killed_during_bash: Path
) -> None:
    code, out, _ = cli(capsys, "inspect", str(killed_during_bash))

    assert code == 0
    assert "open — the kernel stopped during this run" in out
    assert "! bash  pending — effect may have happened; not re-run" in out
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

    code, out, _ = cli(capsys, "inspect", str(session_path))

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

    _, out, _ = cli(capsys, "inspect", str(session_path))

    assert "cost at least $0.50 (1 of 2 usage records have no cost)" in out


def test_json_is_the_summary(capsys: pytest.CaptureFixture[str], killed_during_bash: Path) -> None:
    code, out, err = cli(capsys, "inspect", str(killed_during_bash), "--json")

    assert code == 0
    assert err == ""
    assert json.loads(out) == {"summary": load_session(killed_during_bash).summary()}
    assert out.startswith('{\n "summary": {\n  "sessionId"')  # indent 1, like the fixtures


def test_inspect_while_a_writer_holds_the_file(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path
) -> None:
    complete_run(store)  # `store` is still open: it holds the OS lock

    code, _, _ = cli(capsys, "inspect", str(session_path))

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

    _, out, _ = cli(capsys, "inspect", str(session_path))

    assert "\x1b" not in out
    assert "/tmp/\\x1b[2Jevil" in out


def test_torn_tail_is_reported_and_left_in_place(
    capsys: pytest.CaptureFixture[str], completed: Path
) -> None:
    with completed.open("ab") as file:
        file.write(TORN)
    before = completed.read_bytes()

    code, out, _ = cli(capsys, "inspect", str(completed))

    assert code == 0
    assert (
        f"{len(TORN)} bytes after the last complete line (a write cut short by a crash); "
        "ignored, a writer will cut them on open"
    ) in out
    assert completed.read_bytes() == before


def test_torn_tail_in_json(capsys: pytest.CaptureFixture[str], completed: Path) -> None:
    with completed.open("ab") as file:
        file.write(TORN)

    code, out, _ = cli(capsys, "inspect", str(completed), "--json")

    assert code == 0
    assert json.loads(out)["summary"]["tornTailBytes"] == len(TORN)


def test_corrupt_middle_line_names_file_and_line(
    capsys: pytest.CaptureFixture[str], completed: Path
) -> None:
    replace_line(completed, 4, b'{"kind":"record","seq":')

    code, out, err = cli(capsys, "inspect", str(completed))

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

    code, out, err = cli(capsys, "inspect", str(completed), "--json")

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

    code, _, err = cli(capsys, "inspect", str(session_path))

    assert code == 3
    assert "line 1" in err
    assert "header" in err


@pytest.mark.parametrize("fixture", session_fixtures(), ids=lambda p: p.stem)
def test_fixture_json_matches_expected(capsys: pytest.CaptureFixture[str], fixture: Path) -> None:
    expected: dict[str, Any] = json.loads(fixture.with_suffix(".expected.json").read_text("utf-8"))

    code, out, _ = cli(capsys, "inspect", str(fixture), "--json")
    got = json.loads(out)

    if "summary" in expected:
        assert code == 0
        assert got == expected
    else:
        assert code in (3, 4)
        assert expected["error"].items() <= got["error"].items()


def test_an_mcp_call_is_listed_with_its_source(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path
) -> None:
    """The name the model called and the server it comes from, as the timeline says it
    (docs/glossary.md); never the server's own name alone (`get_current_time`)."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("What time is it?"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("c1", "time__get_current_time", {})]))
    clock = ToolIdentity(name="get_current_time", version="1", source="mcp:time")
    intent = run.intent("c1", clock, {})
    store.commit([intent, Run.result(intent, "12:00")])

    _, out, _ = cli(capsys, "inspect", str(session_path))

    assert "    time__get_current_time · mcp:time  completed\n" in out
