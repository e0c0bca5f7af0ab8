"""Context windows outside 256..100,000,000 tokens in a session file anyone may have
written: no window for their pair, never a crash (docs/spec.md §8)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_agent_loop import Harness, workspace
from test_agent_window import notes, window_server

from tiny_agent_nb.agent import DEFAULT_CONTEXT_WINDOW
from tiny_agent_nb.session import MAX_WINDOW, MIN_WINDOW, load_session
from tiny_agent_nb.session import facts as f

__all__ = ["notes", "workspace"]  # the fixtures


@pytest.mark.parametrize(
    "tokens",
    [10**400, 2**63, MAX_WINDOW + 1, MIN_WINDOW - 1, 1],
    ids=["10**400", "2**63", "MAX_WINDOW+1", "MIN_WINDOW-1", "1"],
)
def test_a_window_out_of_bounds_in_the_file_reads_as_none(notes: Path, tokens: int) -> None:
    with window_server(context_limit=4000) as server:
        h = Harness(server, notes)
        h.store.commit(
            [
                f.NewFact(
                    f.ContextWindow(
                        baseUrl=server.base_url, model="test/model", tokens=4096, source="listing"
                    )
                )
            ]
        )
        h.store.commit(
            [
                f.NewFact(
                    f.ContextWindow(
                        baseUrl=server.base_url, model="test/model", tokens=tokens, source="refusal"
                    )
                )
            ]
        )
        h.close()
        assert load_session(h.path).context_windows == {}  # the newest record holds: none
        again = Harness(server, notes)  # a new process
        try:
            window = again.loop._compactor.window
            assert (window.tokens, window.origin) == (DEFAULT_CONTEXT_WINDOW, "default")
            for n in range(8):
                result = again.loop.run(f"Cell {n}: what do the notes say?")
                assert result.outcome == "completed", result.detail
        finally:
            again.close()
    # The server's refusal taught the window anew, as for a session that knew none.
    ((_, learned),) = load_session(h.path).context_windows.items()
    assert (learned.tokens, learned.source) == (4000, "refusal")
