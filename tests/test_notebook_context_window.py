"""`NotebookRuntime.provider.context_window()`: the window of the configured model as its server
lists it, asked once per kernel, within a few seconds in all, and said in the cell."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from test_agent_window import NOTES, window_server
from test_notebook_kernel import assert_clean

from tiny_agent_nb.agent import LoopObserver
from tiny_agent_nb.notebook import NotebookRuntime, TinyAgent, resolve_session_path
from tiny_agent_nb.notebook._loops import ASKING, WINDOW_ASK_INTERRUPTED
from tiny_agent_nb.notebook._report import window_line
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import HeaderInit, SessionStore, load_session
from tiny_agent_nb.session import facts as f

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, error_reply, model_entry, text_reply
from helpers.polling import wait_until

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers


def listings(server: OpenAIServer) -> int:
    return sum(1 for r in server.listings if r.path == "/v1/models")


def test_the_window_is_asked_once_per_kernel_whatever_sessions_it_opens(
    server: OpenAIServer,
) -> None:
    server.models = [model_entry(context_length=65_536)]
    agent = NotebookRuntime(TinyAgent(base_url=server.base_url, model="test/model"), {})
    try:
        assert agent.provider.context_window() == 65_536
        assert agent.provider.context_window() == 65_536
        agent.close()  # %agent new / session: the kernel's answer holds for the next one
        server.models = [model_entry(context_length=8192)]
        assert agent.provider.context_window() == 65_536
        assert listings(server) == 1
    finally:
        agent.close()


def test_another_model_is_asked_for_its_own_window(server: OpenAIServer) -> None:
    server.models = [model_entry(max_model_len=4096), model_entry("big/one", max_model_len=10**6)]
    config = TinyAgent(base_url=server.base_url, model="test/model")
    agent = NotebookRuntime(config, {})
    try:
        assert agent.provider.context_window() == 4096
        config.model = "big/one"  # %config TinyAgent.model = ... between cells
        assert agent.provider.context_window() == 10**6
        config.model = "test/model"
        assert agent.provider.context_window() == 4096
        assert listings(server) == 2
    finally:
        agent.close()


def test_a_server_without_a_window_says_none_and_is_not_asked_again(
    server: OpenAIServer,
) -> None:
    agent = NotebookRuntime(TinyAgent(base_url=server.base_url, model="test/model"), {})
    try:
        assert agent.provider.context_window() is None
        assert agent.provider.context_window() is None
        assert listings(server) == 1
    finally:
        agent.close()


def test_the_demo_model_has_no_window_and_sends_nothing() -> None:
    agent = NotebookRuntime(TinyAgent(), {})
    assert agent.config.demo_mode()
    assert agent.provider.context_window() is None
    assert agent.provider._http is None  # no client was even made


def _cell(agent: NotebookRuntime, prompt: str) -> None:
    result = agent.run(prompt, observer=LoopObserver(), ask=None)
    assert result.outcome == "completed", result.detail


def test_a_window_stated_only_in_the_servers_metadata_is_recorded_and_not_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp's /props states the window it serves; past it, its 400 says no number."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("".join(NOTES.format(n=n) for n in range(30)))
    path = tmp_path / "analysis.agent.jsonl"
    with window_server(context_limit=4000, overflow="refuse-bare") as server:
        server.props = {"default_generation_settings": {"n_ctx": 4000}, "total_slots": 1}
        config = TinyAgent(base_url=server.base_url, model="test/model")
        agent = NotebookRuntime(config, {})
        try:
            agent.open(
                resolve_session_path(explicit=str(path), environ={}, user_ns={}, cwd=tmp_path)
            )
            for n in range(12):
                _cell(agent, f"Cell {n}: what do the notes say?")
        finally:
            agent.close()
        asked = len(server.listings)
        assert not [r for r in server.requests if r.outcome == "too-long"]  # none too long
        state = load_session(path)
        ((key, learned),) = state.context_windows.items()
        assert key == (server.base_url, "test/model")
        assert (learned.tokens, learned.source) == (4000, "listing")
        assert [e for e in state.entries.values() if e.entry.type == "compaction"]
        # a new kernel: the session says the window, the server is not asked again
        again = NotebookRuntime(TinyAgent(base_url=server.base_url, model="test/model"), {})
        try:
            again.open(
                resolve_session_path(explicit=str(path), environ={}, user_ns={}, cwd=tmp_path)
            )
            _cell(again, "One more: what do the notes say?")
            line = window_line(again.provider, again.read_state()[0])
        finally:
            again.close()
        assert len(server.listings) == asked
        assert not server.invalid_requests
    assert line == (
        "window 4000 tokens, as the server's metadata states it (kept in this session; "
        "`%agent forget-window` forgets it)"
    )


def test_status_says_the_window_and_where_it_comes_from(
    tmp_path: Path, server: OpenAIServer
) -> None:
    path = tmp_path / "s.agent.jsonl"
    init = HeaderInit(
        cwd=str(tmp_path), provider="local", model="test/model", environment_identity="/"
    )
    with SessionStore.open(path, create=init) as store:
        store.commit(
            [
                f.NewFact(
                    f.ContextWindow(
                        baseUrl=server.base_url, model="test/model", tokens=4000, source="refusal"
                    )
                )
            ]
        )
    state = load_session(path)
    config = TinyAgent(base_url=server.base_url, model="test/model")
    agent = NotebookRuntime(config, {})
    try:
        said = "4000 tokens, as the server said when it refused a request too long"
        forget = "`%agent forget-window` forgets it"
        assert (
            window_line(agent.provider, state) == f"window {said} (kept in this session; {forget})"
        )
        config.context_window = 100_000
        assert window_line(agent.provider, state) == (
            f"window 100000 tokens (TinyAgent.context_window); the session learned {said} "
            f"({forget})"
        )
        config.context_window = None
        config.model = "another/model"  # learned for test/model only
        assert window_line(agent.provider, state).startswith("window 32768 tokens by default")
    finally:
        agent.close()
    assert window_line(NotebookRuntime(TinyAgent(), {}).provider, state) == (
        "the offline demo model has no context window"
    )


def test_ctrl_c_while_the_window_is_asked_says_nothing_was_recorded(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    """A server that holds its metadata (read_timeout is 120 s): the user interrupts the
    first cell before any request. Nothing of a run exists: the cell must not say an abort
    was recorded, nor send the user to `%agent resume`."""
    hold = threading.Event()
    server.models_reply = {**error_reply(200, body={"data": []}), "hold": hold}
    kernel = start_kernel(shared=True)
    try:
        assert_clean(kernel.execute("%load_ext tiny_agent_nb"))
        run = kernel.send("%%agent\nHello.")
        wait_until(lambda: listings(server) == 1, 30, what="the window asked")
        kernel.interrupt()
        kernel.collect(run)
    finally:
        hold.set()
    assert_clean(run)
    assert run.stdout == f"Note: {ASKING}\n{WINDOW_ASK_INTERRUPTED}\n"
    assert server.requests == []
    assert load_session(workspace / "analysis.agent.jsonl").operations == {}


def test_metadata_that_never_comes_is_given_up_in_one_deadline_for_all_of_it(
    server: OpenAIServer,
) -> None:
    """A server that holds its `GET /models` answer: the kernel waits for it no longer than
    METADATA_SECONDS (here read_timeout, shorter) in all, and asks neither `/props` nor
    `/api/ps` after it, as it would with time left (three read_timeouts, before)."""
    hold = threading.Event()
    server.models_reply = {**error_reply(200, body={"data": []}), "hold": hold}
    config = ProviderConfig(model="test/model", base_url=server.base_url, read_timeout=0.5)
    try:
        with Provider(config) as provider:
            assert provider.context_window() is None
            assert provider.context_window() is None  # the failure is remembered
    finally:
        hold.set()
    assert [r.path for r in server.listings] == ["/v1/models"]


def test_the_first_cell_says_it_asks_and_no_later_cell_asks_again(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    """The server never answers its metadata: the first cell says it asks, gives up within
    request_timeout (1 s here: METADATA_SECONDS is the most), and runs; neither the next
    cell nor a cell of a new session asks again."""
    hold = threading.Event()
    server.models_reply = {**error_reply(200, body={"data": []}), "hold": hold}
    server.responder = lambda body: text_reply("Hello.")
    kernel = start_kernel(shared=True)
    try:
        assert_clean(kernel.execute("%load_ext tiny_agent_nb"))
        assert_clean(kernel.execute("%config TinyAgent.request_timeout = 1"))
        first = kernel.execute("%%agent\nHello.")
        second = kernel.execute("%%agent\nAgain.")
        assert_clean(kernel.execute("%agent new"))
        third = kernel.execute("%%agent\nIn a new session.")
    finally:
        hold.set()
    for run in (first, second, third):
        assert_clean(run)
    said = f"Note: {ASKING}"
    assert said in first.stdout.splitlines()
    assert said not in second.stdout + third.stdout
    assert [r.path for r in server.listings] == ["/v1/models"]
    assert len(server.requests) == 3  # each cell ran
