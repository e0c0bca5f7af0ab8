"""A careless user's session paths: a path whose last component is
`.` or `..` names a directory as surely as one with a trailing slash, and a quoted path
is the path inside the quotes, as a shell would read it.

The magics run in an in-process IPython shell (tests/helpers/ipython_shell.py); salvage through
the CLI's entry point, as in test_cli_salvage.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.session import HeaderInit, SessionStore, load_session

from helpers.cli_helpers import cli, untouched
from helpers.ipython_shell import run as run_cell
from helpers.ipython_shell import shell
from helpers.scenario import complete_run

__all__ = ["shell"]  # the fixture, from ipython_shell

SESSION = "analysis.agent.jsonl"


def run(shell: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    out = run_cell(shell, code, capsys)
    assert "Traceback" not in out, out
    return out


def usage_error(shell: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    """What a line refused as a UsageError says (one line, no traceback)."""
    result = shell.run_cell(code)
    out = capsys.readouterr()
    assert type(result.error_in_exec).__name__ == "UsageError", out
    assert "Traceback" not in out.out + out.err, out
    return out.out + out.err


def _session(path: Path) -> Path:
    init = HeaderInit(cwd=str(path.parent), provider="p", model="m", environment_identity="e")
    with SessionStore.open(path, create=init) as store:
        complete_run(store)
    return path


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != ".ipython")


@pytest.mark.parametrize("target", ["new-dir/.", "new-dir/./", "sub/../new-dir/.", "other.jsonl/."])
def test_session_path_ending_in_a_dot_names_a_directory_and_creates_or_opens_nothing(
    target: str, shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`new-dir/.` made a session file named new-dir (`Path` drops the `.` as it drops a
    trailing slash), and `other.jsonl/.` opened the session other.jsonl."""
    (tmp_path / "sub").mkdir()
    other = _session(tmp_path / "other.jsonl")
    before = other.read_bytes()
    run(shell, "%load_ext tiny_agent_nb", capsys)
    out = run(shell, f"%agent session {target}", capsys)
    assert out.count("\n") == 1 and "names a directory, not a session file" in out, out
    assert out.rstrip().endswith(f"This kernel still writes to {SESSION}."), out
    assert _names(tmp_path) == sorted([SESSION, "other.jsonl", "sub"])
    assert other.read_bytes() == before
    assert run(shell, "%agent session", capsys).strip() == str(tmp_path / SESSION)


def test_configured_session_path_ending_in_a_dot_is_refused_and_agent_new_makes_nothing(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("config", "TinyAgent.session_path = 'new-dir/.'")
    loaded = run(shell, "%load_ext tiny_agent_nb", capsys)
    assert "names a directory" in loaded, loaded
    out = run(shell, "%agent new", capsys)
    assert out.count("\n") == 1 and "names a directory" in out, out
    assert _names(tmp_path) == []


@pytest.mark.parametrize("quoted", ['"my notes.jsonl"', "'my notes.jsonl'", r"my\ notes.jsonl"])
def test_a_quoted_session_path_is_the_path_inside_the_quotes(
    quoted: str, shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """IPython splits a magic's line keeping the quotes: `%agent session "my notes.jsonl"`
    made a file named `"my notes.jsonl"`, quotes and all, and `my\\ notes.jsonl` was two
    paths."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    out = run(shell, f"%agent session {quoted}", capsys)
    assert "new session my notes.jsonl" in out, out
    assert _names(tmp_path) == sorted([SESSION, "my notes.jsonl"])
    assert run(shell, "%agent session", capsys).strip() == str(tmp_path / "my notes.jsonl")


def test_a_quoted_path_with_a_trailing_slash_names_a_directory(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    out = run(shell, "%agent session 'new dir/'", capsys)
    assert "new dir/ names a directory, not a session file" in out, out
    assert _names(tmp_path) == [SESSION]


@pytest.mark.parametrize(
    "line",
    ["%agent session 'my notes.jsonl", '%agent compact keep "the names', "%%agent -m 'x\nhi"],
)
def test_an_unbalanced_quote_is_a_usage_error_not_a_traceback(
    line: str, shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """IPython's splitter raised ValueError("No closing quotation") through the magic."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    out = usage_error(shell, line, capsys)
    assert "No closing quotation" in out, out
    assert _names(tmp_path) == [SESSION]


def test_the_salvage_hint_for_a_path_with_a_space_can_be_pasted_back(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The damaged-line message says `%agent session OUT`: for an OUT with a space in it,
    that line, pasted as it is, must open OUT, not be refused as two paths."""
    folder = tmp_path / "my work"
    folder.mkdir()
    damaged = _session(folder / "old.jsonl")
    kept = load_session(damaged).facts
    with damaged.open("ab") as file:
        file.write(b'{"not": "a fact"}\n')
    salvaged = folder / "old.salvaged.jsonl"
    run(shell, "%load_ext tiny_agent_nb", capsys)
    refused = run(shell, f"%agent session '{damaged}'", capsys)
    assert "is damaged" in refused, refused
    hint = refused.split("then `", 1)[1].split("`", 1)[0]
    assert hint.startswith("%agent session "), refused
    with untouched(damaged):
        assert cli(capsys, "salvage", str(damaged), "--out", str(salvaged))[0] == 0
    opened = run(shell, hint, capsys)
    assert "old.salvaged.jsonl" in opened and "takes one PATH" not in opened, opened
    assert run(shell, "%agent session", capsys).strip() == str(salvaged)
    facts = load_session(salvaged).facts  # what was kept, then this kernel's record
    assert facts[: len(kept)] == kept
    assert [fact.record.type for fact in facts[len(kept) :]] == ["kernelOpened"]  # type: ignore[union-attr]


@pytest.mark.parametrize("suffix", ["/.", "/./", "/.."])
def test_salvage_refuses_an_out_path_ending_in_a_dot(
    suffix: str, capsys: pytest.CaptureFixture[str], completed: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    out = f"{work / 'new-dir'}{suffix}"
    with untouched(completed):
        code, stdout, err = cli(capsys, "salvage", str(completed), "--out", out)
    assert code == 2, err
    assert stdout == ""
    assert "it names a directory" in err, err
    assert _names(work) == []


def test_an_empty_quoted_session_path_is_a_usage_error_not_the_default_session(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    run(shell, "%agent session other.jsonl", capsys)
    out = usage_error(shell, '%agent session ""', capsys)
    assert "the path is empty" in out, out
    assert run(shell, "%agent session", capsys).strip() == str(tmp_path / "other.jsonl")
