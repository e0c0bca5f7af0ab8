"""What a `%%agent` cell says, in an in-process IPython shell against the loopback server:
why a tool failed, which names a prompt fills, and a model with no key to reach it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.cli import main
from tiny_agent_nb.provider import DEMO_LABEL
from tiny_agent_nb.session import load_session

from helpers.ipython_shell import run, shell
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

__all__ = ["shell"]  # the fixture, from ipython_shell


# ---------------------------------------------------------------- why a tool failed


@pytest.mark.parametrize(
    ("tool", "arguments", "why"),
    [
        ("bash", {"command": "echo line 1; echo line 2; exit 3"}, "[exit code 3]"),
        ("bash", {"command": "echo out; kill -9 $$"}, "[killed by signal SIGKILL]"),
        ("python", {"code": "print('line 1')\n1 / 0"}, "ZeroDivisionError: division by zero"),
        ("read_file", {"path": "missing.txt"}, "missing.txt"),
    ],
)
def test_a_failed_tool_line_says_why_it_failed_not_its_first_output_line(
    shell: InteractiveShell,
    server: OpenAIServer,
    capsys: pytest.CaptureFixture[str],
    tool: str,
    arguments: dict[str, str],
    why: str,
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(tool_calls_reply(tool_call("c1", tool, arguments)), text_reply("done"))
    out = run(shell, "%%agent\ngo", capsys)
    failed = [line for line in out.splitlines() if line.startswith(f"✗ {tool} error")]
    assert len(failed) == 1, out
    assert why in failed[0], out
    assert "line 1" not in failed[0], out


def test_a_failed_tool_line_is_never_cut_mid_sentence(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Arguments that do not fit: the whole reason, up to its last sentence (102
    characters were cut at 100: "... content: Field required. The to")."""
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(tool_calls_reply(tool_call("c1", "write_file", {})), text_reply("done"))
    out = run(shell, "%%agent\ngo", capsys)
    (failed,) = [line for line in out.splitlines() if line.startswith("✗ write_file error")]
    assert failed == (
        "✗ write_file error — invalid arguments for write_file: path: Field required; "
        "content: Field required. The tool did not run."
    ), failed


# ---------------------------------------------------------------- a model with no key


def test_a_cells_model_without_a_key_is_refused_at_once_not_retried(
    shell: InteractiveShell,
    server: OpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The offline demo answers plain cells; `--model X` asks for a real model, which
    needs a key: said before anything is sent or recorded."""
    for name in ("TINY_AGENT_API_KEY", "OPENROUTER_API_KEY", "TINY_AGENT_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    # Were anything sent, it would go to this loopback server, not to OpenRouter.
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{server.port}")
    run(shell, "%load_ext tiny_agent_nb", capsys)
    opened = load_session(tmp_path / "analysis.agent.jsonl").last_seq  # this kernel's record
    out = run(shell, "%%agent --model openai/gpt-4o-mini\nhi", capsys)
    assert "--model openai/gpt-4o-mini" in out and "no API key for OpenRouter" in out, out
    assert "OPENROUTER_API_KEY" in out and "gave up" not in out, out
    assert load_session(tmp_path / "analysis.agent.jsonl").last_seq == opened
    # The demo still answers a cell without --model.
    assert DEMO_LABEL in run(shell, "%%agent\nhi", capsys)


# ---------------------------------------------------------------- a damaged file


def test_a_damaged_session_file_points_to_salvage_and_back(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(text_reply("kept"))
    run(shell, "%%agent\nhello", capsys)
    run(shell, "%unload_ext tiny_agent_nb", capsys)
    path = tmp_path / "analysis.agent.jsonl"
    with path.open("ab") as file:
        file.write(b'{"kind":x}\n')
    damaged = path.read_bytes()
    line = damaged.count(b"\n")

    out = run(shell, "%load_ext tiny_agent_nb", capsys)
    # The file's line and the position inside it, each named as what it is.
    assert f"line {line} of {path} is damaged: invalid JSON at character 9 (" in out, out
    assert "line 1 column" not in out
    salvaged = tmp_path / "analysis.agent.salvaged.jsonl"
    assert f"tiny-agent-nb salvage {path} --out {salvaged}`" in out, out
    assert f"`%agent session {salvaged}`" in out, out
    assert path.read_bytes() == damaged

    # Following the advice works: the salvaged copy opens with the run that was kept.
    # (the command as main() runs it; as a process: tests/test_cli_common.py)
    assert main(["salvage", str(path), "--out", str(salvaged)]) == 0
    out = run(shell, f"%agent session {salvaged}", capsys)
    assert "runs     1" in run(shell, "%agent status", capsys)


# ---------------------------------------------------------------- one client per session


def test_one_http_client_per_session_kept_alive_across_cells_and_closed_with_it(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    server.enqueue(*(text_reply(f"answer {i}") for i in range(5)))
    for i in range(3):
        run(shell, f"%%agent\nquestion {i}", capsys)
    assert len(server.requests) == 3
    assert (server.connections, server.open_connections) == (1, 1)  # one keep-alive connection

    run(shell, "%agent new", capsys)
    server.wait_for_open_connections(0)  # the old session's client was closed
    run(shell, "%%agent\nafter new", capsys)
    assert (server.connections, server.open_connections) == (2, 1)

    run(shell, "%agent session other.jsonl", capsys)
    server.wait_for_open_connections(0)
    run(shell, "%%agent\nin the other session", capsys)
    assert (server.connections, server.open_connections) == (3, 1)

    run(shell, "%unload_ext tiny_agent_nb", capsys)
    server.wait_for_open_connections(0)
    assert server.connections == 3


def test_a_kernel_that_exits_without_unloading_closes_its_client(
    server: OpenAIServer, tmp_path: Path
) -> None:
    server.enqueue(text_reply("hello back"))
    child = Path(__file__).parent / "children" / "exit_with_session.py"
    done = subprocess.run(
        [sys.executable, str(child), server.base_url, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "answered" in done.stdout, done.stdout
    assert done.stdout.strip().endswith("open connections at exit: 0"), done.stdout


def test_the_offline_demo_never_imports_httpx(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "shell.config.TinyAgent.approve = 'auto'\n"  # no one answers here
        "shell.run_line_magic('load_ext', 'tiny_agent_nb')\n"
        "shell.run_cell('%%agent\\n```bash\\necho hi\\n```')\n"
        "shell.run_line_magic('agent', 'status')\n"
        "shell.run_line_magic('unload_ext', 'tiny_agent_nb')\n"
        "print('httpx loaded:', 'httpx' in sys.modules)\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TINY_AGENT_API_KEY", "OPENROUTER_API_KEY", "TINY_AGENT_BASE_URL")
    }
    env.update(IPYTHONDIR=str(tmp_path / ".ipython"), TINY_AGENT_DEMO="1")
    env["JPY_SESSION_NAME"] = str(tmp_path / "demo.ipynb")
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "runs     1" in done.stdout, done.stdout  # the demo did run the cell
    assert done.stdout.strip().endswith("httpx loaded: False"), done.stdout


# ---------------------------------------------------------------- prompt filling


def test_a_cell_fills_prose_fields_and_sends_its_code_verbatim(
    shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%load_ext tiny_agent_nb", capsys)
    run(shell, "x = 'data.csv'", capsys)
    server.enqueue(text_reply("ok"))
    cell = "Check {x}, not {{x}}:\n```bash\nx=1; echo ${x} {x} '{{}}'\n```"
    run(shell, f"%%agent\n{cell}", capsys)
    sent = server.requests[0].body["messages"][-1]["content"]
    assert sent == "Check data.csv, not {x}:\n```bash\nx=1; echo ${x} {x} '{{}}'\n```"

    result = shell.run_cell("%%agent\nUse {x.nope}")
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "{{x.nope}}" in str(result.error_in_exec)
    assert len(server.requests) == 1  # nothing was sent

    help_text = run(shell, "%agent help", capsys)
    assert "{name.attr}" in help_text and "{{name}}" in help_text and "${VAR}" in help_text
