"""`tiny-agent-nb timeline FILE`: the notebook's timeline as a table (pages, --all, --json),
escaped, coloured only on a terminal."""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_agent_nb.cli import main
from tiny_agent_nb.session import (
    HeaderInit,
    SessionStore,
    load_session,
)
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.timeline import PAGE_SIZE, ROWS_PER_RUN

from helpers.cli_helpers import (
    COMMAND,
    TORN,
    cli,
    cli_on_tty,
    start_and_finish,
    tty_env,
    untouched,
)
from helpers.scenario import Run, complete_run


def test_head_of_a_long_timeline_is_just_its_first_lines(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    init = HeaderInit(cwd="/w", provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        for n in range(120):
            complete_run(store, f"prompt {n}")
    # About 140 kB of JSON: more than a pipe holds, so the CLI is still writing when
    # head has its two lines and exits.
    command = shlex.join([*COMMAND, "timeline", "--all", "--json", str(path)])
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{command} | head -n 2"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.stdout.splitlines() == ["{", ' "timeline": {']
    assert (result.returncode, result.stderr) == (141, "")


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
    # each call under the attempt whose answer asked for it
    assert re.search(r"  attempt 1\.1 settled +\d+ ms\n    tool  completed   read_file", out)
    assert '\n    tool  pending     bash command="./deploy.sh"' in out
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
    start_and_finish(store, "clear \x1b[2J the\tscreen\x9b31m\nsecond line")

    _, out, _ = cli(capsys, "timeline", str(session_path))

    assert "\x1b" not in out
    assert "\x9b" not in out
    assert "clear \\x1b[2J the screen\\x9b31m …" in out  # the first line


def test_timeline_json_escapes_every_character_from_the_file_a_reader_would_not_see(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path
) -> None:
    """json.dumps escapes only C0: the C1 CSI, DEL, a bidi override and a character no one
    sees must not reach a terminal raw either, and the JSON still reads back as the file's
    text."""
    prompt = "x\x9b2J\x7f\u202eevil \U000e0001 中文 dry_run\u034f\u3164"
    start_and_finish(store, prompt)

    _, out, _ = cli(capsys, "timeline", str(session_path), "--json")

    assert all(c.isprintable() or c == "\n" for c in out)
    assert "dry_run\\u034f\\u3164" in out  # printable, yet no one sees them
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


class Terminal(io.StringIO):
    """stdout as a terminal: `isatty()` says so (a real one is cli_on_tty's)."""

    def isatty(self) -> bool:
        return True


def colour_terminal_env(monkeypatch: pytest.MonkeyPatch, **changes: str) -> None:
    """This process's environment as tty_env(**changes) makes a child's."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for key, value in changes.items():
        monkeypatch.setenv(key, value)


def on_terminal(monkeypatch: pytest.MonkeyPatch, *argv: str, **env: str) -> str:
    """`tiny-agent-nb ARGV` in this process, its stdout a terminal, in tty_env(**env)."""
    colour_terminal_env(monkeypatch, **env)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(list(argv)) == 0
    monkeypatch.undo()
    return terminal.getvalue()


def test_timeline_colours_only_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, three_runs: Path
) -> None:
    """The one real terminal (a pseudo-terminal, in a process): the other colour tests
    hand the command a stdout that says it is one."""
    colour_terminal_env(monkeypatch)
    piped_code, piped, _ = cli(capsys, "timeline", str(three_runs))
    monkeypatch.undo()
    code, on_tty = cli_on_tty("timeline", str(three_runs), env=tty_env())

    assert piped_code == 0
    assert "\x1b" not in piped
    assert code == 0
    assert "\x1b[32mcompleted  \x1b[0m" in on_tty
    assert "\x1b[34mpending    \x1b[0m" in on_tty
    # Same text once the colours are taken out (a terminal turns LF into CRLF).
    plain = on_tty.replace("\r\n", "\n")
    for code_ in ("32", "31", "34", "0"):
        plain = plain.replace(f"\x1b[{code_}m", "")
    assert plain == piped


@pytest.mark.parametrize(
    "env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}], ids=["NO_COLOR", "TERM=dumb"]
)
def test_timeline_on_a_terminal_without_colour(
    monkeypatch: pytest.MonkeyPatch, three_runs: Path, env: dict[str, str]
) -> None:
    out = on_terminal(monkeypatch, "timeline", str(three_runs), **env)

    assert "completed" in out
    assert "\x1b" not in out


def test_empty_no_color_does_not_disable_colour(
    monkeypatch: pytest.MonkeyPatch, three_runs: Path
) -> None:
    # no-color.org: NO_COLOR counts only when it is set to a non-empty string.
    out = on_terminal(monkeypatch, "timeline", str(three_runs), NO_COLOR="")

    assert "\x1b[32m" in out
    assert on_terminal(monkeypatch, "timeline", str(three_runs)) == out


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
