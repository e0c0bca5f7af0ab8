"""A provider of another wire shape runs the agent loop, written in its own module alone.

tests/helpers/messages_api_provider.py speaks an Anthropic-Messages-like JSON API (a top-level
`system`, turns of typed content blocks, tool results as user turns) and uses nothing but
the package's public names. Here it drives real runs of the loop against a real HTTP
server on loopback that checks each request the way that API does (turns alternate and
open with the user's, every `tool_use` is answered by a `tool_result` in the next turn):
a tool call, its result, the answer, and a second prompt that continues the session.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import AgentLoop, LoopConfig
from tiny_agent_nb.provider import ProviderConfig
from tiny_agent_nb.session import (
    AssistantEntry,
    HeaderInit,
    SessionStore,
    ToolResultEntry,
    load_session,
)
from tiny_agent_nb.tools import ToolContext, builtin_registry

from helpers.messages_api_provider import MessagesAPIProvider


def conversation_problem(body: dict[str, Any]) -> str | None:
    """Why the Messages API would refuse `body`'s turns (None: it would not)."""
    turns = body.get("messages")
    if not isinstance(turns, list) or not turns or turns[0].get("role") != "user":
        return "the first turn must be the user's"
    open_calls: set[str] = set()
    for previous, turn in zip([None, *turns], turns, strict=False):
        if previous is not None and previous["role"] == turn["role"]:
            return "two turns of one role in a row"
        blocks = turn.get("content")
        if not isinstance(blocks, list) or not blocks:
            return "a turn without content blocks"
        answered = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        if turn["role"] == "user" and answered != open_calls:
            return f"tool_use ids {sorted(open_calls)} answered by {sorted(answered)}"
        open_calls = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    return None


class MessagesServer:
    """`POST /v1/messages` on 127.0.0.1: each valid request gets the next scripted answer;
    an invalid one a 400 saying why. Every body is recorded."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.bodies: list[dict[str, Any]] = []
        self._answers = answers
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                server.bodies.append(body)
                problem = conversation_problem(body)
                if self.path != "/v1/messages" or problem or not server._answers:
                    reply, status = {"error": {"message": problem or "unexpected"}}, 400
                else:
                    reply, status = server._answers.pop(0), 200
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"msg_{call_id}",
        "model": "m",
        "content": [{"type": "tool_use", "id": call_id, "name": name, "input": arguments}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 120, "output_tokens": 12},
    }


def text(words: str) -> dict[str, Any]:
    return {
        "id": "msg_text",
        "model": "m",
        "content": [{"type": "text", "text": words}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 160, "output_tokens": 8},
    }


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[MessagesServer, AgentLoop, SessionStore]]:
    (tmp_path / "notes.txt").write_text("hello from the notes\n")
    server = MessagesServer(
        [
            tool_use("toolu_1", "read_file", {"path": "notes.txt"}),
            text("The notes say hello."),
            text("Still hello."),
        ]
    )
    provider = MessagesAPIProvider(server.base_url, model="m")
    store = SessionStore.open(
        tmp_path / "nb.agent.jsonl",
        create=HeaderInit(
            cwd=str(tmp_path), provider="messages", model="m", environment_identity="t"
        ),
    )
    loop = AgentLoop(
        store,
        provider,
        builtin_registry(),
        ToolContext(workspace=tmp_path, namespace={}),
        LoopConfig(ProviderConfig("m", provider="messages"), system_prompt="Be brief."),
    )
    yield server, loop, store
    loop.close()
    store.close()
    provider.close()
    server.close()


def test_a_run_calls_a_tool_and_answers_through_another_wire_shape(
    session: tuple[MessagesServer, AgentLoop, SessionStore],
) -> None:
    server, loop, store = session
    result = loop.run("What do the notes say?")
    assert (result.outcome, result.text) == ("completed", "The notes say hello.")
    first, second = server.bodies
    assert first["system"] == "Be brief."
    assert "read_file" in {tool["name"] for tool in first["tools"]}
    assert first["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What do the notes say?"}]}
    ]
    *before, result_turn = second["messages"]
    assert before == [
        *first["messages"],
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "read_file",
                    "input": {"path": "notes.txt"},
                }
            ],
        },
    ]
    ((block),) = result_turn["content"]
    assert (result_turn["role"], block["type"], block["tool_use_id"]) == (
        "user",
        "tool_result",
        "toolu_1",
    )
    assert "hello from the notes" in block["content"]
    # The session holds what happened, in the package's own terms.
    entries = [fact.entry for fact in load_session(store.path).entries.values()]
    (call,) = [e for e in entries if isinstance(e, AssistantEntry) and e.message.toolCalls]
    assert call.message.toolCalls[0].arguments == {"path": "notes.txt"}
    (tool_result,) = [e for e in entries if isinstance(e, ToolResultEntry)]
    assert tool_result.message.content == block["content"]


def test_the_next_prompt_sends_the_whole_session_again_in_that_shape(
    session: tuple[MessagesServer, AgentLoop, SessionStore],
) -> None:
    server, loop, _ = session
    loop.run("What do the notes say?")
    result = loop.run("And now?")
    assert (result.outcome, result.text) == ("completed", "Still hello.")
    last = server.bodies[-1]["messages"]
    assert [turn["role"] for turn in last] == ["user", "assistant", "user", "assistant", "user"]
    assert last[:3] == server.bodies[1]["messages"]
    assert last[3:] == [
        {"role": "assistant", "content": [{"type": "text", "text": "The notes say hello."}]},
        {"role": "user", "content": [{"type": "text", "text": "And now?"}]},
    ]
