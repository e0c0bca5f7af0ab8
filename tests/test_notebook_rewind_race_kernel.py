"""Two kernels on one notebook's session (docs/spec.md §17): the session's lock lets one
rewind at a time; the second kernel's rewind is refused and changes nothing."""

from __future__ import annotations

from pathlib import Path

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers


def test_a_second_kernel_cannot_rewind_the_session_the_first_holds(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    (workspace / "a.txt").write_bytes(b"mine\n")
    server.enqueue(
        tool_calls_reply(tool_call("c1", "write_file", {"path": "a.txt", "content": "agent\n"})),
        text_reply("Done."),
    )
    first = start_kernel(shared=True)
    assert first.execute("%load_ext tiny_agent_nb").error is None
    assert first.execute("%%agent\nWrite it.").error is None
    before = (workspace / "analysis.agent.jsonl").read_bytes()
    second = start_kernel(shared=True)
    second.execute("%load_ext tiny_agent_nb")
    refused = second.execute("%agent rewind 1 --yes")
    said = refused.stdout + (refused.error or "")
    assert "Rewound" not in said and "in use" in said, said
    assert (workspace / "a.txt").read_bytes() == b"agent\n"
    assert (workspace / "analysis.agent.jsonl").read_bytes() == before
    assert "Rewound: 1 file(s) restored." in first.execute("%agent rewind 1 --yes").stdout
    assert (workspace / "a.txt").read_bytes() == b"mine\n"
