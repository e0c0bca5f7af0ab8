"""A scripted notebook session of 200+ `%%agent` cells in ONE real kernel: each cell reads
a 6 KB file, the context window is small, and the session keeps working through many
automatic compactions with the request size bounded and every conversation valid."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_notebook_kernel import SESSION, assert_clean, load, markdown

from tiny_agent_nb.session import CompactionEntry, load_session

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import (
    OpenAIServer,
    RecordedRequest,
    text_reply,
    tool_call,
    tool_calls_reply,
)

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

CELLS = 210
WINDOW = 16000  # tokens; compaction past 0.8 x 16000 = 12800 (~51 KB of messages)
BIG = "\n".join(f"line {i:04d} " + "q" * 50 for i in range(100))  # ~6 KB, ~1500 tokens


@pytest.mark.slow
def test_two_hundred_cells_with_large_tool_outputs_stay_within_the_window(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    (workspace / "big.txt").write_text(BIG)
    for n in range(CELLS):
        server.enqueue(
            tool_calls_reply(tool_call(f"read_{n}", "read_file", {"path": "big.txt"})),
            text_reply(f"Answer {n}."),
        )
    server.enqueue_summaries(*(text_reply(f"SUMMARY {n}") for n in range(CELLS)))
    kernel = start_kernel(shared=True)
    load(kernel)
    assert_clean(
        kernel.execute(
            f"%config TinyAgent.context_window = {WINDOW}\n"
            "%config TinyAgent.keep_tail_tokens = 2000"
        )
    )
    first_request: list[int] = []  # the index of each cell's first request
    for n in range(CELLS):
        first_request.append(len(server.requests))
        run = kernel.execute(f"%%agent\nRead big.txt, number {n}")
        assert_clean(run)
        assert markdown(run) == f"Answer {n}.", n

    requests = server.requests
    assert server.invalid_requests == []
    assert server.pending_replies == 0  # every cell took its tool call and its answer
    state = load_session(workspace / SESSION)
    compactions = [e for e in state.entries.values() if isinstance(e.entry, CompactionEntry)]
    summarizing = [r for r in requests if "tools" not in r.body]
    # each cell adds ~6.5 KB; with the tool schemas (~5 KB, counted as the server counts
    # them) the 7th cell's second request passes 0.8 of the window and compacts down to
    # the summary and a ~2000-token tail, so every 5th cell after it compacts
    assert len(compactions) == len(summarizing) == len(range(6, CELLS, 5)) == 41
    assert [op.status for op in state.operations.values()] == ["completed"] * CELLS
    sizes = [len(r.raw) for r in requests if "tools" in r.body]
    # bounded: never past the window (4 bytes a token), and no growth with the cell count
    assert max(sizes) < WINDOW * 4
    assert max(sizes[len(sizes) // 2 :]) <= max(sizes[: len(sizes) // 2]) * 1.1
    _table(requests, first_request)


def _table(requests: list[RecordedRequest], first_request: list[int]) -> None:
    """Print each cell's request bytes, S marking a summarization (shown with pytest -s)."""
    for cell, start in enumerate(first_request):
        end = first_request[cell + 1] if cell + 1 < len(first_request) else len(requests)
        row = [
            ("S" if "tools" not in r.body else "") + str(len(r.raw)) for r in requests[start:end]
        ]
        print(f"cell {cell:3d}: {' '.join(row)}")
