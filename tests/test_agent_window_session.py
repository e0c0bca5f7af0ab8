"""200 scripted cells against a server whose 7,500-token window is stated only in its 400
answer, that counts tokens more densely than the client's estimate (3.5 bytes a token,
tool schemas included) and reports its count as each answer's usage: every run completes,
with at most a couple of requests past the window.

    python3 -m pytest -n 0 -s tests/test_agent_window_session.py

prints each cell's requests (the server's tokens; S a summarization, R one it refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_agent_loop import Harness, workspace
from test_agent_window import window_server

from tiny_agent_nb.session import CompactionEntry, load_session

from helpers.openai_server import RecordedRequest, Reply, is_summarization, text_reply, tool_call
from helpers.openai_server import tool_calls_reply as calls_reply

__all__ = ["workspace"]  # the fixture, shared with test_agent_loop

CELLS = 200
WINDOW = 7_500
SIZES = (600, 1500, 3000, 800, 2200)  # bytes of the file each cell reads, in turn


def _file(n: int) -> str:
    return f"notes_{n % len(SIZES)}.txt"


def _model(body: Any) -> Reply:
    if is_summarization(body):
        return text_reply("SUMMARY: the cells read notes_0..4.txt; each holds parser notes.")
    messages = body["messages"]
    cell = sum(m["role"] == "user" and m["content"].startswith("Cell ") for m in messages)
    last = messages[-1]
    if last["role"] == "tool":
        return text_reply(f"Noted: {len(last['content'])} characters of notes.")
    prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    n = int(prompt.split()[1].rstrip(":")) if prompt.startswith("Cell ") else cell
    return calls_reply(tool_call(f"read{n}", "read_file", {"path": _file(n)}))


def _row(requests: list[RecordedRequest]) -> str:
    marks = []
    for r in requests:
        mark = "S" if is_summarization(r.body) else "R" if r.outcome == "too-long" else ""
        marks.append(f"{mark}{r.tokens}")
    return " ".join(marks)


@pytest.mark.slow
def test_two_hundred_cells_fit_a_window_stated_only_in_the_400(workspace: Path) -> None:
    for k, size in enumerate(SIZES):
        line = f"notes {k}: the parser fails on nested quotes in section {k}.\n"
        (workspace / f"notes_{k}.txt").write_text((line * (size // len(line) + 1))[:size])
    with window_server(context_limit=WINDOW, count_usage=True) as server:
        server.responder = _model
        h = Harness(server, workspace)
        starts: list[int] = []
        try:
            for n in range(CELLS):
                starts.append(len(server.requests))
                result = h.loop.run(f"Cell {n}: read {_file(n)} and say what it holds")
                assert result.outcome == "completed", (n, result.detail)
        finally:
            h.close()
        requests = server.requests
    rows = [
        f"cell {n:3d}: {_row(requests[start:end])}"
        for n, (start, end) in enumerate(zip(starts, [*starts[1:], len(requests)], strict=True))
    ]
    print("\n".join(rows))
    refused = [r for r in requests if r.outcome == "too-long"]
    state = load_session(h.path)
    compactions = sum(isinstance(e.entry, CompactionEntry) for e in state.entries.values())
    print(f"{len(requests)} requests, {len(refused)} refused, {compactions} compactions")
    assert [op.status for op in state.operations.values()] == ["completed"] * (CELLS)
    assert len(refused) <= 2
    assert compactions >= 20
    assert max(r.tokens or 0 for r in requests if r.outcome == "served") <= WINDOW
    ((_, learned),) = state.context_windows.items()
    assert (learned.tokens, learned.source) == (WINDOW, "refusal")
    assert not server.invalid_requests  # strict turns held through every checkpoint
