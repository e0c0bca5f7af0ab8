"""Against a REAL OpenAI-compatible server, when one is named (skipped otherwise).

    TINY_AGENT_LIVE_BASE_URL=http://127.0.0.1:8080/v1 TINY_AGENT_LIVE_MODEL=qwen3-4b \\
        python3 -m pytest -m live
    TINY_AGENT_LIVE_BASE_URL=https://openrouter.ai/api/v1 TINY_AGENT_LIVE_API_KEY=sk-or-... \\
        TINY_AGENT_LIVE_MODEL=deepseek/deepseek-v4-flash-0731 python3 -m pytest -m live

OpenRouter, vLLM, Ollama and llama.cpp's server all speak the chat-completions format;
this checks the one you point it at with a real tool-using run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tiny_agent_nb.agent import AgentLoop, LoopConfig
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import HeaderInit, SessionStore, load_session
from tiny_agent_nb.tools import ToolContext, builtin_registry

BASE_URL = os.environ.get("TINY_AGENT_LIVE_BASE_URL")
pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not BASE_URL, reason="no live server: set TINY_AGENT_LIVE_BASE_URL"),
]


def test_a_real_model_reads_a_file_through_the_loop(tmp_path: Path) -> None:
    assert BASE_URL is not None
    (tmp_path / "secret-word.txt").write_text("The word is: pelican\n")
    config = ProviderConfig(
        model=os.environ.get("TINY_AGENT_LIVE_MODEL", "default"),
        base_url=BASE_URL,
        provider="live",
        api_key=os.environ.get("TINY_AGENT_LIVE_API_KEY") or None,
        api_key_source="TINY_AGENT_LIVE_API_KEY",
        read_timeout=300.0,
    )
    init = HeaderInit(
        cwd=str(tmp_path), provider="live", model=config.model, environment_identity=str(tmp_path)
    )
    with SessionStore.open(tmp_path / "s.jsonl", create=init) as store, Provider(config) as p:
        loop = AgentLoop(
            store,
            p,
            builtin_registry().subset(["read_file", "list_files"]),
            ToolContext(workspace=tmp_path.resolve()),
            LoopConfig(config, max_steps=6),
        )
        result = loop.run("Use read_file to read secret-word.txt, then tell me the word.")
        loop.close()
    assert result.outcome == "completed", result.detail
    assert "pelican" in (result.text or "").lower()
    state = load_session(tmp_path / "s.jsonl")
    assert any(
        i.tool.name == "read_file" and i.status == "completed" for i in state.tool_intents.values()
    )
