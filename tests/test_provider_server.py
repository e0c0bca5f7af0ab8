"""The scripted test server itself: it validates like a real provider, holds, records, and
runs as a separate process for crash tests."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiny_agent_nb.provider import Provider, ProviderConfig

from helpers.openai_server import (
    OpenAIServer,
    error_reply,
    text_reply,
    tool_call,
    tool_calls_reply,
    validate_request,
)
from helpers.provider_helpers import verbatim

SERVER_SCRIPT = Path(__file__).parent / "helpers" / "openai_server.py"
USER = {"role": "user", "content": "hi"}


def assistant(*ids: str, content: Any = "") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            for i in ids
        ],
    }


def tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **extra}


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "request_body",
    [
        body(USER),
        body(
            {"role": "system", "content": "s"},
            USER,
            assistant("a", "b"),
            tool("b"),
            tool("a"),
            USER,
        ),
        body(USER, {"role": "assistant", "content": None}),  # no tool calls: null is fine
        body(USER, stream=True, stream_options={"include_usage": True}),
    ],
    ids=["user", "answered-calls", "plain-null-content", "stream-options"],
)
def test_valid_conversations_pass(request_body: dict[str, Any]) -> None:
    assert validate_request(request_body) is None


@pytest.mark.parametrize(
    ("request_body", "says"),
    [
        (body(USER, assistant("a")), "did not have response messages: a"),
        (body(USER, assistant("a", "b"), tool("a"), USER), "did not have response messages: b"),
        (body(USER, assistant("a"), tool("zzz")), "'zzz' not found"),
        (body(USER, assistant("a"), tool("a"), tool("a")), "'a' not found"),
        (body(USER, tool("a")), "must be a response to a preceding message with 'tool_calls'"),
        (body(USER, assistant("a", content=None), tool("a")), "content null"),
        (
            body(USER, {k: v for k, v in assistant("a").items() if k != "content"}, tool("a")),
            "content null",
        ),
        (body(USER, assistant("a", "a"), tool("a")), "Duplicate tool call id"),
        (body(USER, {"role": "robot", "content": "x"}), "'robot'"),
        (body(USER, tools=[]), "too short - 'tools'"),
        (
            body(USER, stream_options={"include_usage": True}),
            "only allowed when 'stream' is enabled",
        ),
        (body(), "too short - 'messages'"),
        ({"messages": [USER]}, "model"),
        ([USER], "JSON object"),
    ],
)
def test_invalid_conversations_are_refused(request_body: Any, says: str) -> None:
    problem = validate_request(request_body)
    assert problem is not None and says in problem


def test_arguments_must_be_a_string_on_the_wire() -> None:
    message = assistant("a")
    message["tool_calls"][0]["function"]["arguments"] = {}
    assert "must be strings" in (validate_request(body(USER, message, tool("a"))) or "")


def test_a_rejected_request_is_answered_400_and_keeps_the_reply(server: OpenAIServer) -> None:
    server.enqueue(text_reply("kept"))
    response = httpx.post(
        f"{server.base_url}/chat/completions", json=body(USER, assistant("a")), timeout=5
    )
    assert response.status_code == 400
    assert "did not have response messages" in response.json()["error"]["message"]
    (request,) = server.requests
    assert (request.status, request.outcome) == (400, "invalid")
    assert server.pending_replies == 1


# ---------------------------------------------------------------- facilities


def test_json_mode_serves_a_whole_completion(server: OpenAIServer) -> None:
    server.enqueue(tool_calls_reply(tool_call("c1", "bash", {"command": "ls"}), content="Looking."))
    response = httpx.post(f"{server.base_url}/chat/completions", json=body(USER), timeout=5)
    answer = response.json()
    assert answer["object"] == "chat.completion"
    message = answer["choices"][0]["message"]
    assert message["content"] == "Looking."
    assert message["tool_calls"][0]["function"] == {
        "name": "bash",
        "arguments": '{"command": "ls"}',
    }
    assert answer["usage"]["prompt_tokens"] == 12


def test_streams_split_tool_arguments_over_several_chunks(server: OpenAIServer) -> None:
    server.enqueue(tool_calls_reply(tool_call("c1", "bash", {"command": "pytest -q"})))
    with httpx.stream(
        "POST", f"{server.base_url}/chat/completions", json=body(USER, stream=True), timeout=5
    ) as response:
        text = response.read().decode()
    events = [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    pieces = [
        call["function"]["arguments"]
        for e in events[:-1]
        for choice in json.loads(e)["choices"]
        for call in choice["delta"].get("tool_calls", [])
    ]
    assert len([p for p in pieces if p]) > 3
    assert "".join(pieces) == '{"command": "pytest -q"}'


def test_a_held_reply_waits_for_its_event_and_requests_can_be_awaited(
    server: OpenAIServer,
) -> None:
    release = threading.Event()
    server.enqueue(text_reply("after the hold", hold=release))
    answers: list[str | None] = []
    provider = Provider(ProviderConfig(model="m", base_url=server.base_url))
    client = threading.Thread(
        target=lambda: answers.append(
            provider.complete(verbatim(b'{"role":"user","content":"x"}'), []).message.content
        )
    )
    client.start()
    (request,) = server.wait_for_requests(1, timeout=10)
    assert request.status is None and not request.finished.is_set() and answers == []
    release.set()
    client.join(10)
    provider.close()
    assert answers == ["after the hold"]
    # The client can read the whole answer before the server's thread marks the request
    # finished (after its write returned): wait for it, bounded.
    assert request.finished.wait(10) and request.status == 200


def test_waiting_for_requests_that_never_come_times_out(server: OpenAIServer) -> None:
    with pytest.raises(TimeoutError, match="0 of 1"):
        server.wait_for_requests(1, timeout=0.05)


def test_an_empty_script_answers_500(server: OpenAIServer) -> None:
    response = httpx.post(f"{server.base_url}/chat/completions", json=body(USER), timeout=5)
    assert response.status_code == 500 and "no scripted reply" in response.text


# ---------------------------------------------------------------- separate process


def test_runs_as_a_separate_process_from_a_json_script(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(
        json.dumps(
            [
                text_reply("first"),
                {**text_reply("held until released"), "hold": True},
                error_reply(429, headers={"Retry-After": "3"}),
            ]
        )
    )
    port_file, log = tmp_path / "port", tmp_path / "requests.jsonl"
    process = subprocess.Popen(
        [
            sys.executable,
            str(SERVER_SCRIPT),
            "--script",
            str(script),
            "--port-file",
            str(port_file),
            "--log",
            str(log),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until the server listens
        port = int(port_file.read_text())
        assert line.strip() == f"listening {port}"
        base = f"http://127.0.0.1:{port}/v1"
        with Provider(ProviderConfig(model="m", base_url=base, api_key="sk-x")) as provider:
            user = b'{"role":"user","content":"hi"}'
            assert provider.complete(verbatim(user), []).message.content == "first"
            answers: list[str | None] = []
            client = threading.Thread(
                target=lambda: answers.append(provider.complete(verbatim(user), []).message.content)
            )
            client.start()
            httpx.post(f"http://127.0.0.1:{port}/_control/release", timeout=5)
            client.join(10)
            assert answers == ["held until released"]
        lines = [json.loads(x) for x in log.read_text().splitlines()]
        assert [x["index"] for x in lines] == [0, 1]
        assert lines[0]["body"]["messages"] == [{"role": "user", "content": "hi"}]
        assert lines[0]["headers"]["authorization"] == "Bearer sk-x"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0
