"""The `%agent` subcommands come from one registry (`SUBCOMMANDS`): the magics dispatch
through it, the help is generated from it, the README's `%agent` table says the same, and
an option a subcommand does not take is refused rather than ignored."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.notebook._commands import SUBCOMMANDS, command_help
from tiny_agent_nb.notebook._magics import AgentMagics

from helpers.ipython_shell import OFFLINE, fresh_shell
from helpers.ipython_shell import run as run_cell

README = Path(__file__).resolve().parent.parent / "README.md"
ROW = re.compile(r"^\| `(?P<usage>%agent [^`]*)` \| (?P<help>.*) \|$")


@pytest.fixture
def shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[InteractiveShell]:
    yield from fresh_shell(tmp_path, monkeypatch, OFFLINE, "commands.ipynb")


def run(shell: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    return run_cell(shell, code, capsys)


def test_the_readme_table_is_the_registry() -> None:
    rows = [ROW.match(line) for line in README.read_text(encoding="utf-8").splitlines()]
    table = [(m["usage"], m["help"].replace("\\|", "|")) for m in rows if m is not None]
    assert table == [(c.usage, c.help) for c in SUBCOMMANDS.values()]


def test_every_subcommand_has_its_method_and_every_method_its_entry() -> None:
    methods = {
        name.removeprefix("_cmd_").replace("_", "-")
        for name in vars(AgentMagics)
        if name.startswith("_cmd_")
    }
    assert methods == set(SUBCOMMANDS)


def test_the_help_lists_every_subcommand_with_its_help_line_start() -> None:
    text = AgentMagics.agent.__doc__ or ""
    flat = " ".join(text.split())
    for command in SUBCOMMANDS.values():
        assert command.usage in text
        assert " ".join(command.help.split()) in flat, command.name
    rows = text.split("Line form:")[1].split("Every step")[0]
    assert max(len(line) for line in rows.splitlines()) <= 80


def test_each_subcommand_says_its_own_help_and_runs_nothing(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    for name in SUBCOMMANDS:
        said = run(shell, f"%agent {name} --help", capsys)
        assert said == command_help(name) + "\n", name
        assert said.startswith(SUBCOMMANDS[name].usage)
    resume = command_help("resume")
    assert "--budget" in resume and "--max-steps" in resume and "--demo" in resume
    assert "--model" not in command_help("compact") and "--demo" in command_help("compact")
    assert "runs     0;" in run(shell, "%agent status", capsys)  # `--help` ran nothing
    # `%agent new --help` did not start a new conversation.
    assert not list(Path.cwd().glob("*.agent.1.jsonl"))
