"""What a hostile or broken model server sends cannot wedge a run: an over-deep tool call
is answered with an error the model sees, an endless answer fails its attempt, and the
session file stays readable throughout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import AgentLoop, LoopConfig
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import HeaderInit, SessionStore, load_session
from tiny_agent_nb.tools import ToolContext, builtin_registry

from helpers.misbehaving_server import MisbehavingServer, forever, once
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

ANSWER = (
    b'data: {"choices":[{"index":0,"delta":{"content":"done"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


class Run:
    def __init__(self, tmp_path: Path, base_url: str, **provider: Any) -> None:
        self.path = tmp_path / "nb.agent.jsonl"
        self.sleeps: list[float] = []
        config = ProviderConfig(
            model="test/model", base_url=base_url, provider="openai-compatible", **provider
        )
        self.provider = Provider(config)
        self.store = SessionStore.open(
            self.path,
            create=HeaderInit(
                cwd=str(tmp_path),
                provider="openai-compatible",
                model="test/model",
                environment_identity=str(tmp_path),
            ),
        )
        self.loop = AgentLoop(
            self.store,
            self.provider,
            builtin_registry(),
            ToolContext(workspace=tmp_path, namespace={}),
            LoopConfig(config),
            sleep=self.sleeps.append,
        )

    def close(self) -> None:
        self.loop.close()
        self.store.close()
        self.provider.close()


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[list[Run]]:
    made: list[Run] = []
    yield made
    for run in made:
        run.close()


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"path": "README.md"}
    for _ in range(depth - 1):
        value = {"path": value}
    return value


def test_a_tool_call_nested_hundreds_deep_is_refused_and_the_file_stays_readable(
    server: OpenAIServer, tmp_path: Path, runs: list[Run]
) -> None:
    server.enqueue(
        tool_calls_reply(tool_call("d1", "read_file", nested(300))),
        text_reply("Sorry, flat arguments next time."),
    )
    run = Run(tmp_path, server.base_url)
    runs.append(run)
    result = run.loop.run("read it")
    assert result.outcome == "completed"
    state = load_session(run.path)  # the file can be read again (it could not be)
    (intent,) = state.tool_intents.values()
    assert intent.status == "error"
    (answer,) = [m for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert answer["tool_call_id"] == "d1" and "not a JSON object" in answer["content"]


def test_an_endless_answer_fails_the_run_without_a_retry(tmp_path: Path, runs: list[Run]) -> None:
    event = b'data: {"choices":[{"index":0,"delta":{"content":"la "}}]}\n\n'
    with MisbehavingServer(forever(event), content_type="text/event-stream") as server:
        run = Run(tmp_path, server.base_url, max_response_bytes=128 * 1024)
        runs.append(run)
        result = run.loop.run("sing")
    assert result.outcome == "failed"
    assert result.detail is not None and "max_response_bytes" in result.detail
    (attempt,) = load_session(run.path).attempts.values()
    assert attempt.status == "failed" and attempt.retryable is False
    assert attempt.error is not None and attempt.error.kind == "protocol"
    assert server.requests == 1 and run.sleeps == []


def test_an_attempt_that_only_pings_times_out_and_the_retry_answers(
    tmp_path: Path, runs: list[Run]
) -> None:
    pings = forever(b": OPENROUTER PROCESSING\n\n", 0.02)
    with MisbehavingServer(pings, once(ANSWER), content_type="text/event-stream") as server:
        run = Run(tmp_path, server.base_url, attempt_timeout=0.5)
        runs.append(run)
        result = run.loop.run("answer")
    assert (result.outcome, result.text) == ("completed", "done")
    attempts = list(load_session(run.path).attempts.values())
    assert [(a.attempt, a.status) for a in attempts] == [(1, "failed"), (2, "settled")]
    error = attempts[0].error
    assert error is not None and error.kind == "timeout" and "attempt_timeout" in error.message
    assert json.dumps(load_session(run.path).summary())  # the whole run is readable
