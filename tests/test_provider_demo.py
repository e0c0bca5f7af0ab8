"""The offline demo model: scripted from the prompt's ```bash blocks, labelled once in
every cell it answers, and reports faithfully what happened to each command."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.agent import INTERRUPTED_RESULT, NOT_STARTED
from tiny_agent_nb.provider import DEMO_LABEL, DemoProvider, TextDelta
from tiny_agent_nb.provider import messages as m
from tiny_agent_nb.session import ToolCall
from tiny_agent_nb.tools import ToolSchema, builtin_registry

from helpers.ipython_shell import OFFLINE, fresh_shell

BASH = ToolSchema(name="bash", version="1", description="run", parameters={"type": "object"})
PROMPT = "Do this:\n```bash\necho one\n```\nand then\n```sh\necho two\n```\n"


def enc(*messages: dict[str, Any]) -> list[m.Message]:
    """The conversation, written as chat messages, as the agent hands it to a provider."""
    return [neutral(message) for message in messages]


def neutral(message: dict[str, Any]) -> m.Message:
    role, content = message["role"], message.get("content") or ""
    if role == "system":
        return m.System(content)
    if role == "user":
        return m.User(content)
    if role == "tool":
        return m.ToolResult(message["tool_call_id"], content)
    calls = tuple(
        ToolCall(
            id=c["id"], name=c["function"]["name"], arguments=json.loads(c["function"]["arguments"])
        )
        for c in message.get("tool_calls", ())
    )
    return m.Assistant(content, calls)


def call(call_id: str, command: str) -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


def test_runs_each_block_in_order_then_summarizes() -> None:
    demo = DemoProvider()
    user = {"role": "user", "content": PROMPT}
    first = demo.complete(enc(user), [BASH])
    (c1,) = first.message.toolCalls
    assert c1.arguments == {"command": "echo one"}
    assert first.usage is not None and first.usage.cost == 0.0
    step1 = [
        user,
        {"role": "assistant", "content": "", "tool_calls": [call(c1.id, "echo one")]},
        {"role": "tool", "tool_call_id": c1.id, "content": "one\n[exit code 0]"},
    ]
    second = demo.complete(enc(*step1), [BASH])
    (c2,) = second.message.toolCalls
    assert c2.arguments == {"command": "echo two"}
    step2 = [
        *step1,
        {"role": "assistant", "content": "", "tool_calls": [call(c2.id, "echo two")]},
        {"role": "tool", "tool_call_id": c2.id, "content": INTERRUPTED_RESULT},
    ]
    streamed: list[str] = []
    final = demo.complete(
        enc(*step2),
        [BASH],
        on_event=lambda e: streamed.append(e.text) if isinstance(e, TextDelta) else None,
    )
    text = final.message.content or ""
    assert not final.message.toolCalls and "".join(streamed) == text
    assert text.startswith("What happened to each command:")
    assert "- `echo one` → ran; its output:\n  ```\n  one\n  ```" in text
    assert "`echo two` → **interrupted**" in text and "not run again" in text


def test_a_prompt_without_commands_gets_an_honest_answer() -> None:
    final = DemoProvider().complete(enc({"role": "user", "content": "hello"}), [BASH])
    text = final.message.content or ""
    assert "fenced `bash` code blocks" in text and "```" not in text  # no stray fence
    assert text.endswith("this one has none.")  # the engine names no surface's settings
    advised = DemoProvider(advice="Set a key.").complete(
        enc({"role": "user", "content": "hello"}), [BASH]
    )
    assert (advised.message.content or "").endswith("this one has none. Set a key.")


def answer(*results: tuple[str, str], tools: tuple[ToolSchema, ...] = (BASH,)) -> str:
    """The demo's final answer after `results`: (command, result content) pairs."""
    prompt = "".join(f"```bash\n{command}\n```\n" for command, _ in results)
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for n, (command, content) in enumerate(results):
        messages.append(
            {"role": "assistant", "content": "", "tool_calls": [call(f"c{n}", command)]}
        )
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": content})
    final = DemoProvider().complete(enc(*messages), list(tools))
    assert not final.message.toolCalls
    return final.message.content or ""


def test_the_whole_output_is_quoted_not_its_last_line() -> None:
    text = answer(("sum.sh", "adding\n3\n4\n5\ntotal 12\n[exit code 0]"))
    assert (
        "- `sum.sh` → ran; its output:\n  ```\n  adding\n  3\n  4\n  5\n  total 12\n  ```" in text
    )


def test_a_failing_command_says_its_exit_code() -> None:
    text = answer(("false", "(no output)\n[exit code 3]"))
    assert "- `false` → ran, **exit code 3**; its output:" in text


def test_long_output_keeps_head_and_tail_and_counts_the_cut() -> None:
    body = "\n".join(f"line {n}" for n in range(1, 101))
    text = answer(("seq", f"{body}\n[exit code 0]"))
    assert "  line 1\n" in text and "  line 10\n  … 80 lines cut …\n  line 91\n" in text
    assert "line 50\n" not in text and "  line 100\n" in text
    wide = "x" * 5000
    text = answer(("wide", f"{wide}\n[exit code 0]"))
    assert "… 3000 characters cut …" in text and len(text) < 3000


def test_backticks_in_output_cannot_close_the_fence() -> None:
    text = answer(("cat a.md", "before\n```\nafter ````\n[exit code 0]"))
    assert "  `````\n  before\n  ```\n  after ````\n  `````" in text


def test_a_denied_command_is_not_allowed_not_ran() -> None:
    text = answer(("rm x", "The user did not allow this bash call; it did not run."))
    assert "- `rm x` → **not allowed**: it did not run" in text and "ran" not in text.split("→")[1]


def test_refused_and_never_started_calls_did_not_run() -> None:
    refused = "The arguments of this bash call are not a JSON object ..., so it did not run."
    text = answer(("a", refused), ("b", NOT_STARTED))
    assert "- `a` → did not run:\n  ```\n  The arguments" in text
    assert "- `b` → did not run (the session stopped before it started)" in text


def test_without_bash_the_commands_it_could_not_run_are_listed() -> None:
    read = ToolSchema(name="read_file", version="1", description="read", parameters={})
    final = DemoProvider().complete(enc({"role": "user", "content": PROMPT}), [read])
    text = final.message.content or ""
    assert not final.message.toolCalls
    assert "The `bash` tool is not among this cell's tools" in text
    assert "these 2 commands:\n- `echo one`\n- `echo two`" in text


# ------------------------------------------------------------------ in a notebook


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """An in-process IPython with nothing configured: the offline demo model answers."""
    for sh in fresh_shell(tmp_path, monkeypatch, OFFLINE, "demo.ipynb"):
        assert sh.run_cell("%load_ext tiny_agent_nb").error_in_exec is None
        yield sh


def cell(shell: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    result = shell.run_cell(code)
    out = capsys.readouterr()
    assert result.error_in_exec is None, out
    return out.out


def test_in_a_cell_a_denied_command_is_reported_as_not_allowed(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = cell(shell, "%%agent --approve deny\n```bash\ntouch made\n```", capsys)
    assert "- `touch made` → **not allowed**: it did not run" in out
    assert not (tmp_path / "made").exists()


def test_in_a_cell_the_sum_is_quoted_whole(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    out = cell(shell, "%%agent\n```bash\nprintf '3\\n4\\n5\\n'; echo sum 12; exit 2\n```", capsys)
    assert "→ ran, **exit code 2**; its output:\n  ```\n  3\n  4\n  5\n  sum 12\n  ```" in out


def test_in_a_cell_without_bash_the_commands_are_listed(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = cell(shell, "%%agent --tools read_file\n```bash\ntouch made\n```", capsys)
    assert "The `bash` tool is not among this cell's tools, so I could not run this" in out
    assert "- `touch made`" in out and not (tmp_path / "made").exists()


def test_its_prompt_count_covers_the_tool_schemas_as_a_server_counts_them() -> None:
    # A count of the messages alone, against a request that also carries every built-in
    # tool's schema, reads to the loop as a server that cut the prompt (fewer than one
    # token per 16 bytes sent, docs/spec.md §8): the demo notebook's first run then
    # failed `contextLength`. Like a server, it counts the whole request: bytes / 4.
    schemas = builtin_registry().schemas()
    messages = enc({"role": "system", "content": "s" * 1200}, {"role": "user", "content": PROMPT})
    answer = DemoProvider().complete(messages, schemas)
    sent = sum(m.size(message) for message in messages) + m.tools_size(schemas)
    assert answer.usage is not None
    assert answer.usage.input_tokens == sent // 4


@pytest.mark.parametrize(
    "code", ["%%agent\nhello", "%%agent\n```bash\necho one\n```", "%%agent --tools grep\nhi"]
)
def test_a_cell_says_the_label_and_the_hint_once(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], code: str
) -> None:
    out = cell(shell, code, capsys)
    assert out.startswith(f"[{DEMO_LABEL}]\n"), out
    assert out.count(DEMO_LABEL) == 1, out
    assert out.count("For a real model") == 1, out


def test_a_resume_cell_says_the_label_once(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    cell(shell, "%%agent --max-steps 1\n```bash\necho one\n```", capsys)
    out = cell(shell, "%agent resume", capsys)
    assert out.startswith(f"[{DEMO_LABEL}]\n") and out.count(DEMO_LABEL) == 1, out
