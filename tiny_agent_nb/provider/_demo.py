"""The offline demo model: a scripted stand-in for an LLM, clearly labelled as such.

It lets a newcomer see the durable mechanics (intents, results, a kernel killed mid-tool,
recovery, resume) without an API key or a model server. It is not a language model and
never pretends to be one: it runs, with the `bash` tool, the fenced ```bash blocks of
the latest prompt, one per step, in order; then it answers with a summary of what
happened, saying it is scripted. Every session it touches says `offline-demo` as its
provider.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from ..session import AssistantMessage, ToolCall
from ._types import Completion, StreamEvent, TextDelta, ToolCallStarted, ToolSchema, UsageReport

DEMO_PROVIDER = "offline-demo"
DEMO_MODEL = "tiny-agent-nb/scripted-demo"
DEMO_LABEL = "offline demo model (scripted, not a real LLM)"

_BLOCK = re.compile(r"```(?:bash|sh)\s*\n(.*?)```", re.DOTALL)
_ADVICE = (
    "For a real model set OPENROUTER_API_KEY, or point TinyAgent.base_url (env "
    "TINY_AGENT_BASE_URL) at a local OpenAI-compatible server."
)


def _commands(prompt: str) -> list[str]:
    return [block.strip() for block in _BLOCK.findall(prompt) if block.strip()]


class DemoProvider:
    """A `ChatProvider` answering from a script derived from the conversation itself."""

    def __init__(self, *, chunk: int = 16) -> None:
        self._chunk = chunk

    def complete(
        self,
        messages: Sequence[bytes],
        tools: Sequence[ToolSchema],
        *,
        on_event: Callable[[StreamEvent], None] | None = None,
    ) -> Completion:
        conversation: list[dict[str, Any]] = json.loads(b"[" + b",".join(messages) + b"]")
        last_user = max(
            (i for i, m in enumerate(conversation) if m.get("role") == "user"), default=-1
        )
        prompt = str(conversation[last_user].get("content", "")) if last_user >= 0 else ""
        since = conversation[last_user + 1 :]
        results = [m for m in since if m.get("role") == "tool"]
        commands = _commands(prompt)
        size = sum(len(m) for m in messages)
        if len(results) < len(commands) and any(t.name == "bash" for t in tools):
            call = ToolCall(
                id=f"demo_{len(results) + 1}_{secrets.token_hex(3)}",
                name="bash",
                arguments={"command": commands[len(results)]},
            )
            if on_event is not None:
                on_event(ToolCallStarted(index=0, id=call.id, name=call.name))
            message = AssistantMessage(
                role="assistant",
                content=None,
                reasoning=None,
                refusal=None,
                toolCalls=(call,),
                finishReason="tool_calls",
            )
            return Completion(message, UsageReport(size // 4, 20, 0, 0, 0.0), DEMO_MODEL)
        text = self._answer(commands, since)
        if on_event is not None:
            for start in range(0, len(text), self._chunk):
                on_event(TextDelta(text[start : start + self._chunk]))
        message = AssistantMessage(
            role="assistant",
            content=text,
            reasoning=None,
            refusal=None,
            toolCalls=(),
            finishReason="stop",
        )
        return Completion(message, UsageReport(size // 4, len(text) // 4, 0, 0, 0.0), DEMO_MODEL)

    @staticmethod
    def _answer(commands: list[str], since: list[dict[str, Any]]) -> str:
        if not commands:
            return (
                f"*{DEMO_LABEL}.* I can only run the ```bash blocks of a prompt, and this "
                f"one has none. {_ADVICE}"
            )
        calls = {
            c["id"]: c["function"]
            for m in since
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        }
        lines = [f"*{DEMO_LABEL}.* What happened to each command:", ""]
        for result in (m for m in since if m.get("role") == "tool"):
            function = calls.get(result.get("tool_call_id", ""), {})
            try:
                command = json.loads(function.get("arguments", "{}")).get("command", "?")
            except ValueError:
                command = "?"
            content = str(result.get("content", "")).strip()
            if content.startswith("Interrupted"):
                verdict = "**interrupted** — it may or may not have run; it was not run again"
            elif content.startswith("Not run"):
                verdict = "never started (the session stopped first)"
            else:
                output = [line for line in content.splitlines() if line.strip()]
                verdict = "ran" + "".join(f"; `{line[:80]}`" for line in output[-2:])
            lines.append(f"- `{command.splitlines()[0][:80]}` → {verdict}")
        lines += ["", _ADVICE]
        return "\n".join(lines)
