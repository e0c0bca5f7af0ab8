"""A provider of another wire shape than OpenAI's: an Anthropic-Messages-like JSON API.

    provider = MessagesAPIProvider("http://127.0.0.1:PORT/v1", model="m")
    completion = provider.complete(context, tools)   # one POST {base}/messages

It is a `ChatProvider` written against the package's public names only
(`tiny_agent_nb.provider.messages`, `Completion`, `ProviderError`, the session's
`AssistantMessage` and `ToolCall`): the system prompt goes in a top-level `system`
field, each turn is a list of typed content blocks (`text`, `tool_use`, `tool_result`),
tool results are user turns, and consecutive turns of one role are merged, as that API
requires. It keeps no cache of its own: it reads the context's messages one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import httpx

from tiny_agent_nb.provider import Completion, ProviderError, StreamEvent, UsageReport
from tiny_agent_nb.provider import messages as m
from tiny_agent_nb.session import AssistantMessage, ToolCall
from tiny_agent_nb.tools import ToolSchema

_STOP = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}


def request_body(model: str, context: m.Context, tools: Sequence[ToolSchema]) -> dict[str, Any]:
    """The POST body for `context` and `tools`."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in context:
        if isinstance(message, m.System):
            system.append(message.content)
            continue
        role, blocks = _blocks(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks  # the API refuses two turns of one role in a row
        else:
            turns.append({"role": role, "content": blocks})
    body: dict[str, Any] = {"model": model, "max_tokens": 1024, "messages": turns}
    if system:
        body["system"] = "\n\n".join(system)
    if tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
            for t in tools
        ]
    return body


def _blocks(message: m.Message) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(message, m.User):
        return "user", [{"type": "text", "text": message.content}]
    if isinstance(message, m.ToolResult):
        block = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        return "user", [{**block, "content": message.content}]
    if isinstance(message, m.Note):
        return "assistant", [{"type": "text", "text": message.content}]
    assert isinstance(message, m.Assistant)
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
        for c in message.tool_calls
    ]
    return "assistant", blocks or [{"type": "text", "text": ""}]


def completion_of(answer: dict[str, Any]) -> Completion:
    """A response body as the loop's `Completion`."""
    texts = [b["text"] for b in answer.get("content", ()) if b.get("type") == "text"]
    calls = tuple(
        ToolCall(id=b["id"], name=b["name"], arguments=b.get("input") or {})
        for b in answer.get("content", ())
        if b.get("type") == "tool_use"
    )
    message = AssistantMessage(
        role="assistant",
        content="".join(texts) or None,
        reasoning=None,
        refusal=None,
        toolCalls=calls,
        finishReason=_STOP.get(answer.get("stop_reason", ""), "stop"),
    )
    usage = answer.get("usage")
    report = None
    if isinstance(usage, dict):
        report = UsageReport(usage.get("input_tokens", 0), usage.get("output_tokens", 0))
    return Completion(message, report, answer.get("model"), answer.get("id"))


class MessagesAPIProvider:
    """One `complete` is one POST of the whole context to `{base_url}/messages`."""

    def __init__(self, base_url: str, *, model: str) -> None:
        self._url = base_url.rstrip("/") + "/messages"
        self._model = model
        self._client = httpx.Client(timeout=30)

    def close(self) -> None:
        self._client.close()

    def complete(
        self,
        context: m.Context,
        tools: Sequence[ToolSchema],
        *,
        on_event: Callable[[StreamEvent], None] | None = None,
        stream: bool | None = None,  # this API is asked without streaming
    ) -> Completion:
        body = request_body(self._model, context, tools)
        try:
            response = self._client.post(self._url, json=body)
        except httpx.HTTPError as exc:
            raise ProviderError(str(exc), kind="network", retryable=True) from exc
        if response.status_code != 200:
            raise ProviderError(
                f"HTTP {response.status_code}: {response.text[:200]}",
                kind="http",
                retryable=response.status_code == 429 or response.status_code >= 500,
                status=response.status_code,
            )
        return completion_of(response.json())
