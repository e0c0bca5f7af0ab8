"""The offline demo model: scripted from the prompt's ```bash blocks, and says so."""

from __future__ import annotations

import json
from typing import Any

from tiny_agent_nb.agent import INTERRUPTED_RESULT
from tiny_agent_nb.provider import DEMO_LABEL, DemoProvider, TextDelta, ToolSchema

BASH = ToolSchema(name="bash", version="1", description="run", parameters={"type": "object"})
PROMPT = "Do this:\n```bash\necho one\n```\nand then\n```sh\necho two\n```\n"


def enc(*messages: dict[str, Any]) -> list[bytes]:
    return [json.dumps(m).encode() for m in messages]


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
    assert DEMO_LABEL in text
    assert "`echo one` → ran; `one`" in text
    assert "`echo two` → **interrupted**" in text and "not run again" in text


def test_a_prompt_without_commands_gets_an_honest_answer() -> None:
    final = DemoProvider().complete(enc({"role": "user", "content": "hello"}), [BASH])
    assert DEMO_LABEL in (final.message.content or "")
    assert "OPENROUTER_API_KEY" in (final.message.content or "")
