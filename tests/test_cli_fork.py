"""`tiny-agent-nb fork FILE [RUN] [--out NEW]`: the conversation through run RUN in a new
session file, whose path it prints; FILE is only read (`cli` checks its bytes and mtime)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiny_agent_nb.session import SessionStore, load_session
from tiny_agent_nb.session import facts as f

from helpers.cli_helpers import cli, cli_process
from helpers.scenario import complete_run


def test_fork_prints_the_new_file_named_as_a_kept_conversation(
    capsys: pytest.CaptureFixture[str], three_runs: Path
) -> None:
    code, out, err = cli(capsys, "fork", str(three_runs), "2")
    assert (code, err) == (0, "")
    fork = three_runs.with_name("notebook.agent.1.jsonl")
    assert out == f"{fork}\n"
    state = load_session(fork)
    assert [op.status for op in state.operations.values()] == ["completed", "failed"]
    assert state.header.id != load_session(three_runs).header.id
    # The next fork takes the next free name: nothing is ever overwritten.
    code, out, _ = cli(capsys, "fork", str(three_runs), "1")
    assert (code, out) == (0, f"{three_runs.with_name('notebook.agent.2.jsonl')}\n")


def test_fork_of_everything_is_the_whole_conversation(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path, tmp_path: Path
) -> None:
    complete_run(store, "first")
    complete_run(store, "second")
    forgotten = f.ContextWindow(baseUrl="http://x", model="m", tokens=None, source="forgotten")
    store.commit([f.NewFact(forgotten)])  # a record after the last run
    out_path = tmp_path / "elsewhere.jsonl"
    code, out, _ = cli(capsys, "fork", str(session_path), "--out", str(out_path))
    assert (code, out) == (0, f"{out_path}\n")
    assert out_path.read_bytes().splitlines()[1:] == session_path.read_bytes().splitlines()[1:]


@pytest.mark.parametrize(
    ("run", "said"),
    [
        ("3", "run 3 of {path} has not ended"),
        (None, "run 3 of {path} has not ended"),
        ("7", "{path} has no run 7 (its runs are 1 to 3"),
    ],
)
def test_fork_refuses_a_run_unknown_or_not_ended_with_exit_2(
    capsys: pytest.CaptureFixture[str], three_runs: Path, run: str | None, said: str
) -> None:
    before = sorted(three_runs.parent.iterdir())
    code, out, err = cli(capsys, "fork", str(three_runs), *([run] if run else []))
    assert (code, out) == (2, "")
    assert err.startswith("error: " + said.format(path=three_runs)), err
    assert "nothing was written" in err
    assert sorted(three_runs.parent.iterdir()) == before


def test_fork_never_overwrites_new(
    capsys: pytest.CaptureFixture[str], three_runs: Path, tmp_path: Path
) -> None:
    mine = tmp_path / "mine.jsonl"
    mine.write_text("mine")
    code, out, err = cli(capsys, "fork", str(three_runs), "1", "--out", str(mine))
    assert (code, out) == (2, "")
    assert "it exists. Nothing was written." in err
    assert mine.read_text() == "mine"


def test_fork_of_a_file_that_is_no_session_says_so_as_every_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"hello": 1}\n')
    code, _, err = cli(capsys, "fork", str(notes), "1")
    assert code == 4 and "is not a tiny-agent-nb session" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.jsonl"]


def test_fork_as_a_process(completed: Path) -> None:
    done = cli_process("fork", completed.name, "1", cwd=completed.parent)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "notebook.agent.1.jsonl\n"
    assert (
        json.loads((completed.parent / "notebook.agent.1.jsonl").read_bytes().splitlines()[0])[
            "kind"
        ]
        == "header"
    )
