"""What the model, its tools, the session file and the environment hand the notebook is
untrusted: it cannot drive the user's terminal, hide part of what the user approves,
move another kernel's live file or wedge the session.

The magics run in an in-process IPython shell against the loopback OpenAI server, as
in test_notebook_magics.py; the other kernel of the lock test is a real child process.
"""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.notebook._display import CellDisplay, answer_bundle
from tiny_agent_nb.safe_markdown import safe_markdown
from tiny_agent_nb.session import HeaderInit, SessionStore, ToolCall, load_session
from tiny_agent_nb.tools import ToolOutput

from helpers.ipython_shell import run as run_cell
from helpers.ipython_shell import shell
from helpers.openai_server import OpenAIServer, error_reply, text_reply, tool_call, tool_calls_reply
from helpers.scenario import BASH, Run

__all__ = ["shell"]  # the fixture, from ipython_shell

SESSION = "analysis.agent.jsonl"
HOLDER = Path(__file__).parent / "children" / "hold_lock.py"
# What a terminal acts on or hides: ESC and CSI sequences, OSC 52 (clipboard), BEL, CR,
# C1's single-byte CSI, DEL, a bidi override and a zero-width space.
HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\r\x9b31m\x7f\u202e\u200b"


def run(shell: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    """`ipython_shell.run`, and the cell printed no traceback either."""
    out = run_cell(shell, code, capsys)
    assert "Traceback" not in out, out
    return out


def question(tool: str, choices: str) -> str:
    """The question asked at the keyboard before a call of `tool` runs."""
    return f"Allow {tool}? [{choices}] (a: every {tool} call for the rest of this session)"


def controls(text: str) -> set[str]:
    """Characters of `text` that a terminal would act on or that would hide text."""
    return {c for c in text if not c.isprintable() and c not in "\n\t"}


class Answers:
    """`input` as the user at the keyboard: gives the scripted answers in turn and keeps
    what the terminal showed before each question."""

    def __init__(self, capsys: pytest.CaptureFixture[str], *answers: str) -> None:
        self._capsys = capsys
        self._answers = list(answers)
        self.shown: list[str] = []

    def __call__(self, prompt: str = "") -> str:
        self.shown.append(self._capsys.readouterr().out + prompt)
        return self._answers.pop(0)


def answering(
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    cell: str,
    *answers: str,
) -> tuple[list[str], str]:
    """Run `cell` with the user answering `answers` in turn: what the terminal showed before
    each question, and what the cell printed."""
    keyboard = Answers(capsys, *answers)
    monkeypatch.setattr(builtins, "input", keyboard)
    return keyboard.shown, run(shell, cell, capsys)


# ---------------------------------------------------------------- approval (item 2)


def test_approval_shows_the_whole_command_and_a_refusal_runs_nothing(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    command = "echo '" + "a long and harmless looking message " * 6 + "' ; touch PWNED"
    server.enqueue(tool_calls_reply(tool_call("b1", "bash", {"command": command})))
    server.enqueue(text_reply("Not run."))
    (shown,), _ = answering(shell, capsys, monkeypatch, "%%agent --approve ask\nsay something", "n")
    assert command in shown  # all of it, the part that does harm included
    assert shown.rstrip().endswith(question("bash", "y/N/a"))
    assert not (tmp_path / "PWNED").exists()
    (intent,) = load_session(tmp_path / SESSION).tool_intents.values()
    assert intent.status == "denied"


def test_approval_makes_characters_that_hide_text_visible(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`\\r` and an erase-line escape would print `echo safe` over `touch PWNED`; a
    default-ignorable character (printable, and no one sees it) makes another word."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    command = f"touch PWNED #{HOSTILE}\recho safe\u034f"
    server.enqueue(tool_calls_reply(tool_call("b1", "bash", {"command": command})))
    server.enqueue(text_reply("Not run."))
    (shown,), _ = answering(shell, capsys, monkeypatch, "%%agent --approve ask\ngo", "no")
    assert controls(shown) == set()
    line = next(line for line in shown.splitlines() if "command:" in line)
    assert line == (
        "  command: touch PWNED #\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\r\\x9b31m\\x7f\\u202e\\u200b"
        "\\recho safe\\u034f"
    )
    assert not (tmp_path / "PWNED").exists()


def test_approval_shows_a_carriage_return_at_a_line_end(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bash reads `cd build\\r` as a directory that is not there: shown as `cd build`, the
    approved `touch PWNED` would run in the workspace, not in build/."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    (tmp_path / "build").mkdir()
    command = "cd build\r\ntouch PWNED"
    server.enqueue(tool_calls_reply(tool_call("b1", "bash", {"command": command})))
    server.enqueue(text_reply("Not run."))
    (shown,), _ = answering(shell, capsys, monkeypatch, "%%agent --approve ask\ngo", "no")
    assert "    │ cd build\\r\n    │ touch PWNED\n" in shown
    assert not (tmp_path / "PWNED").exists()


def test_a_long_write_shows_its_size_head_and_tail_and_v_shows_all_of_it(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    content = "".join(f"line {n}\n" for n in range(1000)).replace("line 500", "import os")
    call = tool_call("w1", "write_file", {"path": "big.py", "content": content})
    server.enqueue(tool_calls_reply(call), text_reply("Written."))
    (short, whole), _ = answering(
        shell, capsys, monkeypatch, "%%agent --approve ask\nwrite it", "v", "y"
    )
    assert "  path: big.py" in short and "  path: big.py" in whole
    assert f"content: ({len(content)} characters, 1001 lines)" in short
    assert "line 0" in short and "line 999" in short and "import os" not in short
    assert "characters not shown (answer v to see all)" in short
    assert short.rstrip().endswith(question("write_file", "y/N/v/a"))
    assert all(f"│ {line}\n" in whole for line in content.splitlines())
    assert whole.rstrip().endswith(question("write_file", "y/N/a"))
    assert (tmp_path / "big.py").read_text() == content


@pytest.mark.slow  # 6 MB of arguments through a run and its display
def test_a_call_too_long_to_show_is_not_allowed_and_never_asked_about(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Jupyter drops a cell's output past its data rate limit while `input()` still asks:
    a 4 MB command would be approved unseen. What cannot be shown whole is refused; a
    huge written content keeps its head and tail but offers no `v`."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    # Room for the 6 MB of arguments: no compaction takes the scripted "Done." as its
    # summary (the run would then retry into an empty script, backing off 15 s).
    run(shell, "%config TinyAgent.context_window = 10_000_000", capsys)
    command = "ls" + " " * 4_000_000 + "; touch PWNED"
    content = "x\n" * 1_000_000
    server.enqueue(
        tool_calls_reply(
            tool_call("b1", "bash", {"command": command}),
            tool_call("w1", "write_file", {"path": "big.txt", "content": content}),
            chunk_size=65536,
        ),
        text_reply("Done."),
    )
    (asked,), out = answering(shell, capsys, monkeypatch, "%%agent --approve ask\ngo", "y")
    # only the write was asked about
    assert "bash was not allowed" in asked and "too long to show here" in asked
    assert "(too many to show here)" in asked
    assert asked.rstrip().endswith(question("write_file", "y/N/a"))
    assert len(asked) + len(out) < 200_000
    assert not (tmp_path / "PWNED").exists()
    assert (tmp_path / "big.txt").read_text() == content
    assert "Done." in out and server.pending_replies == 0 and len(server.requests) == 2


# ---------------------------------------------------------------- terminal (item 4)


def test_model_text_tool_names_tool_output_and_server_errors_cannot_drive_the_terminal(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(
        error_reply(503, f"overloaded {HOSTILE}", headers={"retry-after": "0"}),
        tool_calls_reply(
            tool_call("b1", "bash", {"command": f"printf '{HOSTILE} failed'; exit 3"}),
            tool_call("u1", f"ls{HOSTILE}", {}),
            content=f"Checking {HOSTILE}now.",
        ),
        text_reply(f"Done {HOSTILE}.\r\nSecond\tline."),
    )
    out = run(shell, "%%agent\ngo", capsys)
    assert controls(out) == set()
    escaped = "\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\r\\x9b31m\\x7f\\u202e\\u200b"
    osc_and_clear = "\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J"
    assert f"(HTTP 503: overloaded {osc_and_clear}" in out  # the retry line quotes the server
    assert f"Checking {escaped}now." in out  # streamed text
    assert "→ bash command=" in out
    assert "✗ bash error — [exit code 3]\n" in out  # why it failed, then its output, escaped
    assert f"✗ bash error — [exit code 3]\n    {escaped} failed\n    [exit code 3]\n" in out
    # A tool name the model made up, and the error that quotes it.
    assert f"✗ ls{escaped} error — Unknown tool 'ls{escaped}'" in out
    assert f"Done {escaped}.\\r\nSecond\tline." in out  # lines and tabs are kept


def test_status_and_the_load_report_escape_what_the_session_file_says(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session file is data: its attempts' model, a run's detail and a tool call's
    arguments are shown escaped by `%load_ext` (the recovery report) and `%agent status`."""
    path = tmp_path / SESSION
    init = HeaderInit(
        cwd=str(tmp_path), provider="p", model="m", environment_identity=str(tmp_path)
    )
    with SessionStore.open(path, create=init) as store:
        steps = Run(environment=str(tmp_path))
        store.commit(steps.start("q"))
        store.commit(steps.attempt(provider=f"p{HOSTILE}", model=f"m{HOSTILE}"))
        arguments = {"command": f"echo {HOSTILE}"}
        store.commit(steps.answer(None, [("c1", "bash", arguments)]))
        store.commit([steps.intent("c1", BASH, arguments)])  # the kernel died here
    report = run(shell, "%load_ext tiny_agent_nb", capsys)
    assert "⚠ bash command=" in report and " interrupted — " in report
    status = run(shell, "%agent status", capsys)
    assert "runs used p\\x1b]52;c;" in status and "⚠ bash command=" in status
    assert controls(report + status) == set()


# ---------------------------------------------------------------- the lock (item 11)


def test_new_in_a_kernel_refused_the_file_leaves_the_other_kernels_file_alone(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / SESSION
    holder = subprocess.Popen(
        [sys.executable, str(HOLDER), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith("ready ")
        before = path.read_bytes()
        refused = run(shell, "%load_ext tiny_agent_nb", capsys)
        assert f"is in use by process {holder.pid}" in refused
        out = run(shell, "%agent new", capsys)
        assert out == (
            f"tiny-agent-nb: {SESSION} is in use by process {holder.pid}; this kernel will not "
            "write to it. Stop that kernel, or use `%agent session OTHER.jsonl`.\n"
        )
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == [SESSION]
    finally:
        holder.communicate("")  # EOF: the holder closes its store and exits
    assert holder.returncode == 0
    # Once the other kernel is gone, `%agent new` works here.
    out = run(shell, "%agent new", capsys)
    assert "Kept the previous conversation as analysis.agent.1.jsonl." in out
    assert (tmp_path / "analysis.agent.1.jsonl").read_bytes() == before


# ---------------------------------------------------------------- bad input (item 14)


def test_session_on_a_directory_fifo_or_device_keeps_the_current_session(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    (tmp_path / "a-directory").mkdir()
    os.mkfifo(tmp_path / "a-fifo")
    (tmp_path / "a-file").write_text("not a directory")
    refusals = {
        "a-directory": "is a directory, not a session file",
        "a-fifo": "is a named pipe (FIFO), not a session file",
        "/dev/null": "is a device, not a session file",
        "a-file/inside.jsonl": "a-file is not an existing directory",
        # A trailing slash names a directory: not a file of that name made, nor a file
        # already there opened.
        "new-dir/": "new-dir/ names a directory, not a session file; nothing was created",
        "a-file/": "a-file/ names a directory, not a session file",
    }
    for target, reason in refusals.items():
        out = run(shell, f"%agent session {target}", capsys)
        assert out.count("\n") == 1 and reason in out, out
        assert out.rstrip().endswith(f"This kernel still writes to {SESSION}."), out
    assert not (tmp_path / "new-dir").exists()
    assert (tmp_path / "a-file").read_text() == "not a directory"
    assert run(shell, "%agent session", capsys).strip() == str(tmp_path / SESSION)
    # Naming the session it has is not a switch: it stays open (not refused as in use).
    again = run(shell, f"%agent session {SESSION}", capsys)
    assert again.startswith(f"tiny-agent-nb: session {SESSION} (set explicitly) — 0 run(s)")
    server.enqueue(text_reply("Still here."))
    assert "Still here." in run(shell, "%%agent\nhello", capsys)
    assert [o.status for o in load_session(tmp_path / SESSION).operations.values()] == ["completed"]


@pytest.mark.parametrize("config", ["", "new-dir/"])
def test_agent_new_after_a_refused_open_moves_and_makes_nothing(
    config: str,
    shell: InteractiveShell,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The kernel's first open was refused, so `%agent new` has only the refused path to
    go on: a file that is no session is the user's (the open said it was left untouched),
    and a path with a trailing slash still names a directory."""
    notes = tmp_path / SESSION
    notes.write_text("my notes, not a session\n")
    if config:
        shell.run_line_magic("config", f"TinyAgent.session_path = {config!r}")
    loaded = run(shell, "%load_ext tiny_agent_nb", capsys)
    refused = "names a directory" if config else "is not a session file"
    assert refused in loaded, loaded
    out = run(shell, "%agent new", capsys)
    assert out.count("\n") == 1 and refused in out, out
    assert "Kept the previous conversation" not in out
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".ipython") == [SESSION]
    assert notes.read_text() == "my notes, not a session\n"


@pytest.mark.parametrize("key", ["sk-or-v1 with a space", "sk-or-v1-line\nbreak"])
def test_a_malformed_api_key_loads_and_the_run_names_the_variable_to_fix(
    key: str,
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TINY_AGENT_API_KEY", key)
    loaded = run(shell, "%load_ext tiny_agent_nb", capsys)
    assert f"new session {SESSION}" in loaded
    opened = load_session(tmp_path / SESSION).last_seq  # this kernel's record
    out = run(shell, "%%agent\nhello", capsys)
    assert out.count("\n") == 1 and out.startswith("tiny-agent-nb: "), out
    assert "TINY_AGENT_API_KEY" in out
    assert key not in out and key.split(maxsplit=1)[0] not in out
    assert server.requests == []
    assert load_session(tmp_path / SESSION).last_seq == opened


PAYLOAD = "<img src=x onerror=alert(1)>"


def test_the_answer_bundle_keeps_the_answer_as_plain_text() -> None:
    answer = f"Done {PAYLOAD}\n\tindented\x1b[2J"
    bundle = answer_bundle(answer)
    assert bundle["text/plain"] == f"Done {PAYLOAD}\n\tindented\\x1b[2J"
    assert bundle["text/markdown"] == safe_markdown(answer)


def _folded(rich: bool, content: str) -> list[dict[str, str]]:
    """What a cell shows of a completed bash call whose output is `content`."""
    shown: list[dict[str, str]] = []
    cell = CellDisplay(
        rich=rich,
        secrets=["sk-cell-secret"],
        publish=lambda bundle, **_: shown.append(bundle),
        clock=lambda: 0.0,
    )
    call = ToolCall(id="c1", name="bash", arguments={"command": "make"})
    cell.on_tool_start(call, call.arguments)
    cell.on_tool_end(call, ToolOutput(content), "completed")
    return shown


LONG = "\n".join(
    [f"start {PAYLOAD} sk-cell-secret{HOSTILE}", *(f"line {n}" for n in range(2000)), "the end"]
)


def test_a_calls_output_is_folded_under_its_line_as_inert_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In a rich frontend the output is a `<details>` under the call's line: escaped as
    the timeline escapes a result (no element, no terminal escape, no secret), its head
    and tail when long; its text/plain, as a terminal's, a few indented lines."""
    (bundle,) = _folded(True, LONG)
    markup = bundle["text/html"]
    assert "<details" in markup and "<summary>output</summary>" in markup
    assert "<img" not in markup and "&lt;img src=x onerror=alert(1)&gt;" in markup
    assert "\x1b" not in markup and "\\x1b]52" in markup and "sk-cell-secret" not in markup
    assert "line 0\n" in markup and "the end" in markup and "line 1000\n" not in markup
    assert "characters truncated" in markup
    assert capsys.readouterr().out.splitlines()[-1] == "✓ bash completed"
    text = bundle["text/plain"].splitlines()
    assert text[0].startswith(f"    start {PAYLOAD} [redacted]\\x1b]52;c;cHduZWQ=\\x07")
    assert controls(bundle["text/plain"]) == set()
    assert text[1:] == ["    line 0", "    … 1998 lines …", "    line 1999", "    the end"]

    assert _folded(False, LONG) == []  # a terminal: printed, the same lines
    printed = capsys.readouterr().out.splitlines()
    assert printed[-5:] == text and printed[-6] == "✓ bash completed"
