"""The agent loop and what tools hand it, against a real OpenAI-compatible server on
loopback: a key any tool shows is redacted in the file, the model's view and the screen;
a lone surrogate is kept as a replacement character.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_agent_loop import (
    KEY,
    Harness,
    _messages,
    workspace,
)

from tiny_agent_nb.session import (
    ToolResultEntry,
    load_session,
)

from helpers.openai_server import (
    OpenAIServer,
    text_reply,
    tool_call,
    tool_calls_reply,
)

__all__ = ["workspace"]  # the fixtures, from test_agent_loop


# ---------------------------------------------------------------- untrusted tool output


def secret_pieces(secret: str, size: int = 8) -> list[str]:
    """Every run of `size` characters of `secret`: none may show anywhere."""
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def test_the_api_key_shown_by_any_tool_is_redacted_in_the_file_the_model_and_the_screen(
    server: OpenAIServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_AGENT_API_KEY", KEY)
    (workspace / ".env").write_text(f"OPENROUTER_API_KEY={KEY}\n")
    # grep shows 400 characters of a line: the key is cut after its first 7.
    (workspace / "bundle.min.js").write_text("k=" + "x" * 391 + KEY + ";\n")
    h = Harness(server, workspace, secrets=(KEY,))
    try:
        server.enqueue(
            tool_calls_reply(
                tool_call("r1", "read_file", {"path": ".env"}),
                tool_call("b1", "bash", {"command": "cat .env; env | grep -c API_KEY"}),
                tool_call("p1", "python", {"code": "import os\nos.environ['TINY_AGENT_API_KEY']"}),
                tool_call("g1", "grep", {"pattern": "k=x", "path": "bundle.min.js"}),
            ),
            text_reply("done"),
        )
        assert h.loop.run("show me the key").outcome == "completed"
        raw = h.path.read_text()
        sent = json.dumps(_messages(server, 1))
        shown = "\n".join(o.content for o in h.tool_ends)
        for piece in secret_pieces(KEY):
            assert piece not in raw and piece not in sent and piece not in shown
        assert shown.count("[redacted]") == 4  # read_file, bash (cat), python and grep
        assert "\n0\n" in shown  # bash's environment held no API_KEY variable at all
        grep_result = h.tool_ends[-1].content
        assert not any(piece in grep_result for piece in secret_pieces(KEY, 4))
    finally:
        h.close()


def test_a_key_the_model_repeats_is_redacted_in_what_is_kept_and_its_tools_get_the_call_as_sent(
    server: OpenAIServer, workspace: Path
) -> None:
    """bash can read the kernel's environment (/proc/$TINY_AGENT_KERNEL_PID/environ);
    once the model has the key, its answer, its reasoning and its calls' arguments are
    redacted before they are committed. The tools get the arguments the model sent (a
    redaction never changes what a tool does), so the file cannot say exactly what ran:
    such an intent is never replayed, even a read's."""
    (workspace / f"notes-{KEY}.txt").write_text("the notes")
    h = Harness(server, workspace, secrets=(KEY,))
    try:
        server.enqueue(
            tool_calls_reply(
                tool_call("w1", "write_file", {"path": "k.txt", "content": f"key={KEY}"}),
                tool_call("b1", "bash", {"command": f"echo {KEY} >> k2.txt"}),
                tool_call("r1", "read_file", {"path": f"notes-{KEY}.txt"}),
                tool_call("r2", "read_file", {"path": "k.txt"}),
                content=f"The key is {KEY}.",
                reasoning=f"I found {KEY} in the environment.",
            ),
            text_reply(f"Saved {KEY} to k.txt."),
        )
        result = h.loop.run("leak it")
        assert result.outcome == "completed" and result.text == "Saved [redacted] to k.txt."
        raw = h.path.read_text()
        assert KEY not in raw and KEY not in json.dumps(_messages(server, 1))
        assert (workspace / "k.txt").read_text() == f"key={KEY}"  # as the model asked
        assert (workspace / "k2.txt").read_text() == f"{KEY}\n"
        state = load_session(h.path)
        intents = {i.tool_call_id: i for i in state.tool_intents.values()}
        assert intents["r1"].arguments["path"] == "notes-[redacted].txt"
        assert intents["r1"].replay_policy == "never"  # its file is not the one it read
        assert intents["r2"].replay_policy == "safeRead"  # nothing of it was redacted
        shown = [o.content for o in h.tool_ends]
        assert shown[2].endswith("\nthe notes") and shown[3].endswith("\nkey=[redacted]")
    finally:
        h.close()


def test_a_prompt_holding_the_key_is_kept_and_sent_redacted(
    server: OpenAIServer, workspace: Path
) -> None:
    """A prompt filled from a variable (an error message, a config) may hold the key: it
    is committed and sent as every other text is, redacted, and the user is told so once
    (the loop, which redacts it, says it; a surface does not redact it a second time)."""
    h = Harness(server, workspace, secrets=(KEY,))
    try:
        server.enqueue(text_reply("I see a redacted key."), text_reply("Fine."))
        assert h.loop.run(f"Why does this fail?\nAuthError: bad key {KEY}").outcome == "completed"
        sent = server.requests[0].raw.decode()
        assert "bad key [redacted]" in sent and KEY not in sent
        assert KEY not in h.path.read_text() and "bad key [redacted]" in h.path.read_text()
        assert h.notices == [
            "the prompt holds a configured secret (the API key, a credential); it is sent "
            "and kept as [redacted]."
        ]
        assert h.loop.run("And now, a lone \udc80 surrogate?").outcome == "completed"
        assert len(h.notices) == 1  # made valid Unicode, not redacted: nothing to say
    finally:
        h.close()


def test_a_lone_surrogate_in_tool_output_is_kept_as_a_replacement_and_the_next_run_works(
    server: OpenAIServer, workspace: Path
) -> None:
    (workspace / os.fsdecode(b"caf\xe9.txt")).write_text("not UTF-8 named")
    h = Harness(server, workspace)
    try:
        server.enqueue(
            tool_calls_reply(
                tool_call("p1", "python", {"code": "print('half a pair: \\ud800')"}),
                tool_call("l1", "list_files", {}),
            ),
            text_reply("listed"),
            text_reply("still here"),
        )
        assert h.loop.run("list").outcome == "completed"
        state = load_session(h.path)
        contents = [
            e.entry.message.content
            for e in state.entries.values()
            if isinstance(e.entry, ToolResultEntry)
        ]
        assert contents[0] == "half a pair: \ufffd"
        assert "caf\ufffd.txt" in contents[1] or "caf\\xe9.txt" in contents[1]
        assert h.loop.run("again").outcome == "completed"
    finally:
        h.close()
