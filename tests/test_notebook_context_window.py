"""`NotebookAgent.model.context_window()`: the window of the configured model as its server
lists it, asked once per open session (the compaction trigger reads it every run)."""

from __future__ import annotations

from tiny_agent_nb.notebook import TinyAgent
from tiny_agent_nb.notebook._runtime import NotebookAgent

from openai_server import OpenAIServer, model_entry


def listings(server: OpenAIServer) -> int:
    return sum(1 for r in server.listings if r.path == "/v1/models")


def test_the_window_is_asked_once_per_session_and_again_after_it_closes(
    server: OpenAIServer,
) -> None:
    server.models = [model_entry(context_length=65_536)]
    agent = NotebookAgent(TinyAgent(base_url=server.base_url, model="test/model"), {})
    try:
        assert agent.model.context_window() == 65_536
        assert agent.model.context_window() == 65_536
        assert listings(server) == 1
        agent.close()  # %agent new / session: the next session asks afresh
        server.models = [model_entry(context_length=8192)]
        assert agent.model.context_window() == 8192
        assert listings(server) == 2
    finally:
        agent.close()


def test_another_model_is_asked_for_its_own_window(server: OpenAIServer) -> None:
    server.models = [model_entry(max_model_len=4096), model_entry("big/one", max_model_len=10**6)]
    config = TinyAgent(base_url=server.base_url, model="test/model")
    agent = NotebookAgent(config, {})
    try:
        assert agent.model.context_window() == 4096
        config.model = "big/one"  # %config TinyAgent.model = ... between cells
        assert agent.model.context_window() == 10**6
        config.model = "test/model"
        assert agent.model.context_window() == 4096
        assert listings(server) == 2
    finally:
        agent.close()


def test_a_server_without_a_window_says_none_and_is_not_asked_again(
    server: OpenAIServer,
) -> None:
    agent = NotebookAgent(TinyAgent(base_url=server.base_url, model="test/model"), {})
    try:
        assert agent.model.context_window() is None
        assert agent.model.context_window() is None
        assert listings(server) == 1
    finally:
        agent.close()


def test_the_demo_model_has_no_window_and_sends_nothing() -> None:
    agent = NotebookAgent(TinyAgent(), {})
    assert agent.config.demo_mode()
    assert agent.model.context_window() is None
    assert agent.model._http is None  # no client was even made
