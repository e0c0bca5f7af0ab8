"""What the notebook layer says, in an in-process IPython: the offline banner once per
kernel in short lines, a help text without reST markup, glyphs Debian's fonts draw, and
a session path whose directory does not exist refused instead of created."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from helpers.ipython_shell import OFFLINE, fresh_shell
from helpers.ipython_shell import run as run_cell

PACKAGE = Path(__file__).resolve().parent.parent / "tiny_agent_nb"


@pytest.fixture
def shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[InteractiveShell]:
    """A shell with nothing configured: the offline demo model answers."""
    yield from fresh_shell(tmp_path, monkeypatch, OFFLINE, "words.ipynb")


def run(shell: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    """`ipython_shell.run`, after dropping what was printed before the cell."""
    capsys.readouterr()
    return run_cell(shell, code, capsys)


def test_the_offline_banner_is_said_once_per_kernel_in_short_lines(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said = [run(shell, "%load_ext tiny_agent_nb", capsys)]
    said.append(run(shell, "%agent new", capsys))
    said.append(run(shell, f"%agent session {tmp_path / 'other.agent.jsonl'}", capsys))
    said.append(run(shell, "%unload_ext tiny_agent_nb\n%load_ext tiny_agent_nb", capsys))
    assert "OFFLINE DEMO MODEL (SCRIPTED, NOT A REAL LLM)" in said[0]
    assert sum(s.count("OFFLINE DEMO MODEL") for s in said) == 1, said
    assert max(len(line) for line in said[0].splitlines()) <= 80, said[0]


@pytest.mark.parametrize(
    "configured",
    ["TinyAgent.base_url = 'http://127.0.0.1:9/v1'", "TinyAgent.api_key = 'sk-or-v1-x'"],
)
def test_a_model_configured_in_the_loading_cell_gets_no_offline_banner(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], configured: str
) -> None:
    """`%config` right after `%load_ext`, in the same cell: no demo model answers, so
    the banner that says one does is not printed."""
    said = run(shell, f"%load_ext tiny_agent_nb\n%config {configured}", capsys)
    assert "OFFLINE DEMO" not in said.upper(), said


def test_agent_dash_dash_help_is_the_help_in_the_line_and_the_cell_form(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    help_text = run(shell, "%agent help", capsys)
    for asked in ("%agent --help", "%agent -h"):
        assert run(shell, asked, capsys) == help_text, asked
    # After a command, its own help (generated from the same registry).
    status_help = run(shell, "%agent status --help", capsys)
    assert status_help.startswith("%agent status\n") and status_help != help_text
    assert run(shell, "%agent help status", capsys) == status_help
    # The cell form shows the help and runs nothing: no prompt was sent or recorded.
    assert run(shell, "%%agent --help\nList the files.", capsys) == help_text
    assert "runs     0;" in run(shell, "%agent status", capsys)


def test_a_session_in_a_directory_that_does_not_exist_is_refused_not_created(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    out = run(shell, f"%agent session {tmp_path / 'typo' / 'deeper' / 'x.jsonl'}", capsys)
    assert "is not an existing directory" in out and "nothing was created" in out, out
    assert "This kernel still writes to words.agent.jsonl." in out
    assert not (tmp_path / "typo").exists()
    assert "words.agent.jsonl" in run(shell, "%agent session", capsys)


def _drawn_by(family: str, char: str) -> bool:
    found = subprocess.run(
        ["fc-list", f":family={family}:charset={ord(char):x}", "family"],
        capture_output=True,
        text=True,
        check=True,
    )
    return bool(found.stdout.strip())


def test_every_glyph_the_package_prints_is_in_debians_default_font() -> None:
    """Debian's Chromium draws text in DejaVu Sans (fonts-dejavu-core) when the page asks
    for a font it lacks; a character outside it is drawn as an empty box (U+23F9 ⏹ was)."""
    if shutil.which("fc-list") is None or not _drawn_by("DejaVu Sans", "A"):
        pytest.skip("fontconfig with DejaVu Sans is needed to check glyphs")
    chars = {c for path in PACKAGE.rglob("*.py") for c in path.read_text() if ord(c) > 0x7F}
    missing = sorted(c for c in chars if not _drawn_by("DejaVu Sans", c))
    assert not missing, [f"U+{ord(c):04X} {c}" for c in missing]
    assert re.search(r"[^\x00-\x7f]", "■ ‖")  # the replacements are non-ASCII, and drawn
