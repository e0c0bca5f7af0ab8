"""The offline demo model: a scripted stand-in for an LLM, clearly labelled as such.

It lets a newcomer see the durable mechanics (intents, results, a kernel killed mid-tool,
recovery, resume) without an API key or a model server. It is not a language model and
never pretends to be one: it runs, with the `bash` tool, the fenced ```bash blocks of
the latest prompt, one per step, in order; then it answers with what happened to each
command, read from its result as a model would: the output (head and tail) and exit code
of one that ran, or that it was not allowed, did not run, was interrupted, or could not
run because `bash` is not among the cell's tools. Every session it touches says
`offline-demo` as its provider, and every cell it answers starts with `DEMO_LABEL` (the
notebook prints it, once; the answer does not repeat it).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..session import AssistantMessage, ToolCall
from ..words import first_line
from ._messages import Assistant, Context, Message, ToolResult, User, prompt_of, size, tools_size
from ._types import Completion, StreamEvent, TextDelta, ToolCallStarted, UsageReport

if TYPE_CHECKING:
    from ..tools import ToolSchema

DEMO_PROVIDER = "offline-demo"
DEMO_MODEL = "tiny-agent-nb/scripted-demo"
DEMO_LABEL = "offline demo model (scripted, not a real LLM)"

_BLOCK = re.compile(r"```(?:bash|sh)\s*\n(.*?)```", re.DOTALL)
_SHOWN_COMMAND = 80  # characters of a command's first line in the answer
_QUOTED_LINES = 10  # a result's first and last lines quoted; the middle is counted
_QUOTED_CHARS = 1000  # the same, in characters, for results with very long lines
# How the agent's results begin (agent/_planner.py, agent/_turns.py, agent/_tool_step.py):
# the demo reads only the conversation, as a model would.
_INTERRUPTED = "Interrupted"
_NOT_STARTED = "Not run:"
_DENIED = "The user did not allow"
# The note the bash tool ends every result it ran with (tools/_bash.py).
_ENDING = re.compile(
    r"\n\[(exit code -?\d+|killed by signal \w+|timed out after [^\]\n]*)\]"
    r"(?:\n\[background processes[^\]\n]*\])?\s*$"
)


def _commands(prompt: str) -> list[str]:
    return [block.strip() for block in _BLOCK.findall(prompt) if block.strip()]


class DemoProvider:
    """A `ChatProvider` answering from a script derived from the conversation itself."""

    def __init__(self, *, chunk: int = 16, advice: str = "") -> None:
        """`advice`: how to get a real model, in the words of the surface that runs the
        demo (its settings); each answer ends with it."""
        self._chunk = chunk
        self._advice = advice

    def complete(
        self,
        context: Context,
        tools: Sequence[ToolSchema],
        *,
        on_event: Callable[[StreamEvent], None] | None = None,
        stream: bool | None = None,  # a script: it answers the same either way
    ) -> Completion:
        conversation: list[Message] = list(context)
        # The prompt, without the user's cells or a kernel notice sent before it; a
        # resume's notice alone is no prompt (the one it continues is before it).
        prompts = [
            (i, prompt_of(m.content)) for i, m in enumerate(conversation) if isinstance(m, User)
        ]
        last_user, prompt = next(((i, p) for i, p in reversed(prompts) if p), (-1, ""))
        since = conversation[last_user + 1 :]
        results = [m for m in since if isinstance(m, ToolResult)]
        commands = _commands(prompt)
        # Counted as a server counts a request, its tool schemas too: the loop takes a
        # count far under what it sent for a server that cut the prompt (agent/_window.py).
        sent = sum(size(m) for m in conversation)
        sent += tools_size(tools) if tools else 0
        has_bash = any(t.name == "bash" for t in tools)
        text: str | None = None
        calls: tuple[ToolCall, ...] = ()
        if len(results) < len(commands) and has_bash:
            command = commands[len(results)]
            call_id = f"demo_{len(results) + 1}_{secrets.token_hex(3)}"
            calls = (ToolCall(id=call_id, name="bash", arguments={"command": command}),)
            if on_event is not None:
                on_event(ToolCallStarted(index=0, id=call_id, name="bash"))
        else:
            text = self._answer(commands, since, has_bash)
            if on_event is not None:
                for start in range(0, len(text), self._chunk):
                    on_event(TextDelta(text[start : start + self._chunk]))
        message = AssistantMessage(
            role="assistant",
            content=text,
            reasoning=None,
            refusal=None,
            toolCalls=calls,
            finishReason="tool_calls" if calls else "stop",
        )
        output = len(text) // 4 if text is not None else 20
        return Completion(message, UsageReport(sent // 4, output, 0, 0, 0.0), DEMO_MODEL)

    def _answer(self, commands: list[str], since: list[Message], has_bash: bool) -> str:
        if not commands:
            return (
                "I can only run the commands in fenced `bash` code blocks of a prompt, and "
                f"this one has none. {self._advice}"
            ).rstrip()
        calls = {c.id: c for m in since if isinstance(m, Assistant) for c in m.tool_calls}
        lines = ["What happened to each command:", ""]
        results = [m for m in since if isinstance(m, ToolResult)]
        for result in results:
            call = calls.get(result.tool_call_id)
            command = str(call.arguments.get("command", "?")) if call is not None else "?"
            lines += _report(command, result.content)
        left = commands[len(results) :]
        if left and not has_bash:
            lines.append(
                "The `bash` tool is not among this cell's tools, so I could not run "
                + ("this command:" if len(left) == 1 else f"these {len(left)} commands:")
            )
            lines += [f"- {_code_span(first_line(c, _SHOWN_COMMAND))}" for c in left]
        if self._advice:
            lines += ["", self._advice]
        return "\n".join(lines)


def _report(command: str, content: str) -> list[str]:
    """What happened to one command, read from its result as the model was given it: a
    bash result ends with its exit note; anything else means the command did not run."""
    head = f"- {_code_span(first_line(command, _SHOWN_COMMAND))} →"
    if content.startswith(_INTERRUPTED):
        return [f"{head} **interrupted** — it may have run; it was not run again"]
    if content.startswith(_NOT_STARTED):
        return [f"{head} did not run (the session stopped before it started)"]
    if content.startswith(_DENIED):
        return [f"{head} **not allowed**: it did not run"]
    ending = _ENDING.search(content)
    if ending is None:  # refused before it started: unknown tool, bad arguments, ...
        return [f"{head} did not run:", *_quote(content)]
    note = ending.group(1)
    verdict = "ran" if note == "exit code 0" else f"ran, **{note}**"
    return [f"{head} {verdict}; its output:", *_quote(content[: ending.start()])]


def _code_span(text: str) -> str:
    """`text` as inline code whatever backticks it holds (CommonMark: a longer run of
    backticks opens the span, and a space pads text that starts or ends with one)."""
    ticks = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _quote(text: str) -> list[str]:
    """A result's text as an indented fenced block, bounded to its head and tail with a
    count of what was cut; the fence is longer than any backtick run inside, so the output
    cannot close it early."""
    text = text.strip("\n") or "(no output)"
    lines = text.splitlines()
    if len(lines) > 2 * _QUOTED_LINES:
        cut = len(lines) - 2 * _QUOTED_LINES
        lines = [*lines[:_QUOTED_LINES], f"… {cut} lines cut …", *lines[-_QUOTED_LINES:]]
    text = "\n".join(lines)
    if len(text) > 2 * _QUOTED_CHARS:
        cut = len(text) - 2 * _QUOTED_CHARS
        text = f"{text[:_QUOTED_CHARS]}\n… {cut} characters cut …\n{text[-_QUOTED_CHARS:]}"
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return [f"  {line}" for line in (fence, *text.splitlines(), fence)]
