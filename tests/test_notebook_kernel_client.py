"""A real kernel's HTTP client (jupyter_client, loopback server): one per session,
reused by every cell over one keep-alive connection, closed with the session."""

from __future__ import annotations

from pathlib import Path

from helpers.kernel_helpers import Execution, Kernel, kernel_env
from helpers.openai_server import OpenAIServer, text_reply


def clean(run: Execution) -> str:
    assert run.error is None, run.error
    assert run.reply is not None and run.reply["status"] == "ok", run.reply
    return run.stdout


def test_a_kernel_reuses_one_connection_across_cells_and_closes_it_with_the_session(
    tmp_path: Path, server: OpenAIServer
) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    env = kernel_env(tmp_path, base_url=server.base_url, notebook=workspace / "analysis.ipynb")
    kernel = Kernel.start(cwd=workspace, env=env)
    try:
        clean(kernel.execute("%load_ext tiny_agent_nb"))
        server.enqueue(*(text_reply(f"answer {i}") for i in range(4)))
        for i in range(3):
            assert f"answer {i}" in str(kernel.execute(f"%%agent\nquestion {i}").displays)
        assert (server.connections, server.open_connections) == (1, 1)

        assert "analysis.agent.1.jsonl" in clean(kernel.execute("%agent new"))
        server.wait_for_open_connections(0)
        clean(kernel.execute("%%agent\nafter new"))
        assert (server.connections, server.open_connections) == (2, 1)
    finally:
        kernel.shutdown()
    server.wait_for_open_connections(0)
