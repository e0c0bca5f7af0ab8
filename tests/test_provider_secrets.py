"""The API key never appears in an exception, a repr, a traceback or a log line, even
when the server echoes it back in its error message."""

from __future__ import annotations

import logging
import socket
import threading
import traceback
from collections.abc import Callable

import pytest

from tiny_agent_nb.provider import Provider, ProviderConfig, ProviderError

from helpers.openai_server import (
    OpenAIServer,
    Reply,
    drop_reply,
    error_reply,
    raw_reply,
    stream_error_reply,
    text_reply,
)
from helpers.polling import wait_until
from helpers.provider_helpers import verbatim

KEY = "sk-or-v1-LEAKCHECK-0123456789abcdef0123456789abcdef"
USER = b'{"role":"user","content":"hi"}'

SCENARIOS: dict[str, Callable[[], Reply]] = {
    "400 echoing the key": lambda: error_reply(400, f"Incorrect API key provided: {KEY}"),
    "401 echoing the key": lambda: error_reply(401, f"Invalid key {KEY}"),
    "403": lambda: error_reply(403, f"Key {KEY} is disabled"),
    "402": lambda: error_reply(402, f"Key {KEY} has no credits"),
    "404": lambda: error_reply(404, f"No model for key {KEY}"),
    "429": lambda: error_reply(429, f"Slow down {KEY}", headers={"Retry-After": "1"}),
    "500": lambda: error_reply(500, f"Crashed while serving {KEY}"),
    "quote truncated inside the key": lambda: error_reply(400, "x" * 480 + " " + KEY),
    "503 plain text": lambda: raw_reply(
        f"upstream said {KEY}", status=503, content_type="text/plain"
    ),
    "401 raw body": lambda: raw_reply(f"bad key {KEY}", status=401, content_type=None),
    "html 200": lambda: raw_reply(f"<html>{KEY}</html>", content_type="text/html"),
    "broken json": lambda: raw_reply('{"key": "' + KEY, content_type="application/json"),
    "no choice": lambda: raw_reply(f": {KEY}\n\ndata: [DONE]\n\n"),
    "mid-stream error": lambda: stream_error_reply("partial", code=401, message=f"revoked {KEY}"),
    "dropped stream": lambda: drop_reply("partial answer", after=3),
    "read timeout": lambda: text_reply("late", hold=threading.Event()),
}


def assert_no_key(*texts: str) -> None:
    for text in texts:
        # not the key, nor any recognizable piece of it (a quote may be cut inside it)
        pieces = [KEY[i : i + 12] for i in range(len(KEY) - 11)]
        assert not [piece for piece in pieces if piece in text]


def check(exc: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    assert_no_key(
        str(exc),
        repr(exc),
        "".join(traceback.format_exception(exc)),
        caplog.text,
        "\n".join(str(r.args) for r in caplog.records),
    )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_error_path_reveals_the_key(
    server: OpenAIServer, scenario: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.enqueue(SCENARIOS[scenario]())
    # A short read timeout only where it is the path under test: on a loaded machine the
    # other replies took longer than 0.2 s to start, and a timeout took their paths' place.
    read_timeout = 0.2 if scenario == "read timeout" else 30.0
    config = ProviderConfig(
        model="m", base_url=server.base_url, api_key=KEY, read_timeout=read_timeout
    )
    with Provider(config) as provider, pytest.raises(ProviderError) as info:
        provider.complete(verbatim(USER), [])
    sent = wait_until(lambda: server.requests, what="the request at the server")
    assert sent[0].headers["authorization"] == f"Bearer {KEY}"  # it was sent
    check(info.value, caplog)
    assert_no_key(repr(provider), repr(config))


def test_a_refused_connection_does_not_reveal_the_key(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = ProviderConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY)
    with Provider(config) as provider, pytest.raises(ProviderError) as info:
        provider.complete(verbatim(USER), [])
    check(info.value, caplog)


def test_a_success_logs_nothing_secret(
    server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.enqueue(text_reply("fine"))
    with Provider(ProviderConfig(model="m", base_url=server.base_url, api_key=KEY)) as p:
        completion = p.complete(verbatim(USER), [])
    assert_no_key(caplog.text, repr(completion))
    assert "POST" in caplog.text  # the logs were captured at all


@pytest.mark.parametrize("bad", [KEY + "\nX-Injected: 1", KEY + " trailing words", KEY + "\u00e9"])
def test_a_key_that_cannot_be_sent_is_refused_without_quoting_it(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        Provider(ProviderConfig(model="m", api_key=bad, api_key_source="OPENROUTER_API_KEY"))
    assert "OPENROUTER_API_KEY" in str(info.value)
    assert_no_key(str(info.value), repr(info.value))


def test_a_key_with_surrounding_whitespace_is_trimmed() -> None:
    with OpenAIServer(api_key=KEY) as server:
        server.enqueue(text_reply("ok"))
        config = ProviderConfig(model="m", base_url=server.base_url, api_key=f"  {KEY}\n")
        with Provider(config) as provider:
            assert provider.complete(verbatim(USER), []).message.content == "ok"
