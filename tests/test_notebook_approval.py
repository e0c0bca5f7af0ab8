"""What a run does before a call that changes things, as a user at a terminal meets it
(docs/spec.md §13): asked by default, and an answer "every call of this tool for the rest
of this session" kept by the kernel for that tool and that session only.

The magics run in an in-process IPython shell with nothing configured about approval;
the user answers `input()`. The buttons, and a kernel where no one can answer, are in
test_notebook_controls.py.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.session import load_session

from helpers.ipython_shell import KEY, fresh_shell, run, served
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

SESSION = "analysis.agent.jsonl"


@pytest.fixture
def shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: OpenAIServer
) -> Iterator[InteractiveShell]:
    """A shell whose approval is the product's default: nothing sets it."""
    yield from fresh_shell(tmp_path, monkeypatch, served(server.base_url, KEY), approve=None)


def answering(
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    cell: str,
    *answers: str,
) -> list[str]:
    """Run `cell`, the user answering `answers` in turn: each question asked."""
    asked: list[str] = []
    left = list(answers)

    def keyboard(prompt: str = "") -> str:
        asked.append(prompt)
        return left.pop(0)

    monkeypatch.setattr(builtins, "input", keyboard)
    run(shell, cell, capsys)
    return asked


def test_a_tool_allowed_for_the_rest_of_the_session_is_asked_about_no_more_and_only_it(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    log = tmp_path / "log.txt"
    server.enqueue(
        tool_calls_reply(tool_call("b1", "bash", {"command": "echo 1 >> log.txt"})),
        text_reply("One line."),
    )
    # No --approve, no configuration: the default asks.
    (asked,) = answering(shell, capsys, monkeypatch, "%%agent\nWrite a line.", "a")
    assert asked.startswith("Allow bash? [y/N/a]")
    assert log.read_text() == "1\n"

    # A new run: bash is not asked about again; python, never allowed, is.
    server.enqueue(
        tool_calls_reply(
            tool_call("b2", "bash", {"command": "echo 2 >> log.txt"}),
            tool_call("p1", "python", {"code": "defined = 1"}),
        ),
        text_reply("Done."),
    )
    (asked,) = answering(shell, capsys, monkeypatch, "%%agent\nOne more, and a name.", "n")
    assert asked.startswith("Allow python? [y/N/a]")
    assert log.read_text() == "1\n2\n"
    assert "defined" not in shell.user_ns
    state = load_session(tmp_path / SESSION)
    assert [i.status for i in state.tool_intents.values()] == ["completed", "completed", "denied"]
    # The allowance is the kernel's, not an option: each run records that it asked.
    assert [op.options.approve for op in state.operations.values() if op.options] == [
        "ask",
        "ask",
    ]
    assert "allowed  bash: every call, for the rest of this session" in run(
        shell, "%agent status", capsys
    )

    # Another session (`%agent new`) asks again.
    run(shell, "%agent new", capsys)
    server.enqueue(
        tool_calls_reply(tool_call("b3", "bash", {"command": "echo 3 >> log.txt"})),
        text_reply("Not written."),
    )
    (asked,) = answering(shell, capsys, monkeypatch, "%%agent\nA third line.", "n")
    assert asked.startswith("Allow bash?")
    assert log.read_text() == "1\n2\n"
    assert "allowed  bash" not in run(shell, "%agent status", capsys)


def test_a_write_is_asked_about_with_whether_a_rewind_can_restore_it_not_its_digests(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(
        tool_calls_reply(tool_call("w1", "write_file", {"path": "notes.txt", "content": "hi\n"})),
        text_reply("Written."),
    )
    monkeypatch.setattr(builtins, "input", lambda prompt="": "y")
    shown = run(shell, "%%agent\nWrite a note.", capsys)
    assert (tmp_path / "notes.txt").read_text() == "hi\n"
    assert "history: kept: a rewind can restore the file" in shown
    assert "sha256:" not in shown
