"""A careless user's session paths (attack-s8 on 19f156d): a path whose last component is
`.` or `..` names a directory as surely as one with a trailing slash.

The magics run in an in-process IPython shell (tests/ipython_shell.py); salvage through
the CLI's entry point, as in test_cli_salvage.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from ipython_shell import run as run_cell
from ipython_shell import shell

from tiny_agent_nb.session import HeaderInit, SessionStore

from cli_helpers import cli, untouched
from scenario import complete_run

__all__ = ["shell"]  # the fixture, from ipython_shell

SESSION = "analysis.agent.jsonl"


def run(shell: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    out = run_cell(shell, code, capsys)
    assert "Traceback" not in out, out
    return out


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
