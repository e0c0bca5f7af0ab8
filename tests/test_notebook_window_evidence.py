"""A learned window needs evidence (docs/spec.md §8): a record taken from a server's
count alone (`truncation`, which older writers made) is no window; a configured window
is the one the run uses, and a failure under it states figures that agree; a learned
window the user forgot stays forgotten for every later process."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from test_agent_window import NOTES, harness, scripted_model, window_server

from tiny_agent_nb.agent import ContextFull
from tiny_agent_nb.notebook._report import CONFIGURED_TOO_LARGE, next_step
from tiny_agent_nb.session import HeaderInit, SessionStore, load_session
from tiny_agent_nb.session import facts as f

from helpers.ipython_shell import KEY, fresh_shell, served
from helpers.ipython_shell import run as run_cell
from helpers.openai_server import OpenAIServer, Reply, usage


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("".join(NOTES.format(n=n) for n in range(30)))
    return workspace


def with_window(path: Path, base_url: str, tokens: int, source: Any) -> None:
    """A session file whose only fact is a contextWindow record for test/model."""
    init = HeaderInit(
        cwd=str(path.parent), provider="local", model="test/model", environment_identity="/"
    )
    with SessionStore.open(path, create=init) as store:
        store.commit(
            [
                f.NewFact(
                    f.ContextWindow(
                        baseUrl=base_url, model="test/model", tokens=tokens, source=source
                    )
                )
            ]
        )


def constant_count(body: Any) -> Reply:
    """A server that reports 900 input tokens for every request, whatever it was sent."""
    reply = scripted_model(body)
    reply["usage"] = usage(prompt=900)
    return reply


@pytest.mark.parametrize("configured", [None, 32_768])
def test_a_window_taken_from_a_count_is_none_and_runs_complete(
    notes: Path, configured: int | None
) -> None:
    """A file from an older writer holds the 900 tokens its count made a window of. It
    reads as no window, and with the window configured as the error advised the run uses
    that one: the same counts fail nothing."""
    with OpenAIServer(turns="alternating") as server:
        server.responder = constant_count
        with_window(notes.parent / "nb.agent.jsonl", server.base_url, 900, "truncation")
        h = harness(server, notes, context_window=configured)
        try:
            window = h.loop._compactor.window
            expected = (32_768, "configured") if configured else (32_768, "default")
            assert (window.tokens, window.origin) == expected
            for n in range(6):
                result = h.loop.run(f"Cell {n}: what do the notes say?")
                assert result.outcome == "completed", result.detail
        finally:
            h.close()
    state = load_session(h.path)
    assert state.context_windows == {}
    assert not [a for a in state.attempts.values() if a.error]


def test_a_refusal_under_a_configured_window_states_figures_that_agree(notes: Path) -> None:
    """The server serves 4000 tokens and says so; TinyAgent.context_window says 32768.
    The run that fails says what the server refused (its count of the request, and its
    window), the window the run compacted under, and what the system prompt and tools
    take of the request: no figure contradicts another."""
    with window_server(context_limit=4000) as server:
        h = harness(server, notes, context_window=32_768)
        try:
            for n in range(12):
                result = h.loop.run(f"Cell {n}: what do the notes say?")
                if result.outcome != "completed":
                    break
        finally:
            h.close()
        refused = [r for r in server.requests if r.outcome == "too-long"]
    assert result.outcome == "failed"
    assert isinstance(result.reason, ContextFull)
    detail = result.detail or ""
    assert "though the model's context window is 32768 tokens, as configured" in detail
    assert "(its window: 4000 tokens)" in detail
    figures = re.search(
        r"a request of about (\d+) tokens \(the system prompt and the tool definitions "
        r"about (\d+) of them\)",
        detail,
    )
    assert figures is not None, detail
    request, fixed = int(figures[1]), int(figures[2])
    assert request == refused[-1].tokens  # the server's own count of what it refused
    assert 4000 < request < 32_768
    conversation = re.search(r"takes about (\d+) tokens", detail)
    assert conversation is not None, detail
    assert fixed + int(conversation[1]) <= request * 1.25  # estimates of parts of it
    assert next_step(result.reason) == CONFIGURED_TOO_LARGE


@pytest.fixture
def shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: OpenAIServer
) -> Iterator[InteractiveShell]:
    with_window(tmp_path / "analysis.agent.jsonl", server.base_url, 900, "refusal")
    yield from fresh_shell(tmp_path, monkeypatch, served(server.base_url, KEY))


def test_a_forgotten_window_stays_forgotten_for_a_new_kernel(
    shell: InteractiveShell,
    tmp_path: Path,
    server: OpenAIServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_cell(shell, "%load_ext tiny_agent_nb", capsys)
    status = run_cell(shell, "%agent status", capsys)
    assert (
        "window 900 tokens, as the server said when it refused a request too long "
        "(kept in this session; `%agent forget-window` forgets it)"
    ) in status
    said = run_cell(shell, "%agent forget-window", capsys)
    assert said.startswith("Forgot the context window this session learned for test/model")
    assert "900 tokens" in said
    assert "window 32768 tokens by default" in run_cell(shell, "%agent status", capsys)
    again = run_cell(shell, "%agent forget-window", capsys)
    assert "nothing to forget" in again
    # what a new kernel reads of the file: no window for the pair, and why
    state = load_session(tmp_path / "analysis.agent.jsonl")
    assert state.context_windows == {}
    assert state.summary()["contextWindows"] == [
        {"baseUrl": server.base_url, "model": "test/model", "tokens": None, "source": "forgotten"}
    ]
