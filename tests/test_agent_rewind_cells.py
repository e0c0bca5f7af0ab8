"""A rewind's notebook cells (docs/spec.md §17): the cells the real loop's cell tools
changed, put back through the notebook's apply (tests/helpers/fake_notebook.py, which
applies a change only where the cell holds what it was made from, as the bridge does):
edits undone, inserted cells removed, deleted ones brought back in place with their id;
a cell changed since is a conflict, left unless --force; no live notebook: by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import (
    AgentLoop,
    LoopConfig,
    carry_out,
    operation_numbered,
    plan_rewind,
)
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import FileStore, HeaderInit, SessionStore
from tiny_agent_nb.tools import ToolContext, builtin_registry

from helpers.fake_notebook import FakeNotebook
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

SOURCES = ("%%agent", "a = 1", "b = 2", "c = 3")


def agent_changes_cells(server: OpenAIServer, tmp_path: Path, notebook: FakeNotebook) -> Path:
    """Run 1 asks nothing of the notebook; run 2 edits c1, inserts a cell after c2 and
    deletes c3 (each accepted)."""
    path = tmp_path / "nb.agent.jsonl"
    init = HeaderInit(
        cwd=str(tmp_path), provider="p", model="test/model", environment_identity=str(tmp_path)
    )
    store = SessionStore.open(path, create=init)
    provider = Provider(ProviderConfig(model="test/model", base_url=server.base_url))
    loop = AgentLoop(
        store,
        provider,
        builtin_registry(),
        ToolContext(workspace=tmp_path, notebook=notebook),
        LoopConfig(ProviderConfig("test/model", provider="p"), approval="auto"),
        ask=lambda _tool, _arguments: True,
    )
    server.enqueue(
        text_reply("Hello."),
        tool_calls_reply(
            tool_call("e1", "edit_cell", {"cell_id": "c1", "source": "a = 10\nprint(a)"}),
            tool_call("i1", "insert_cell", {"after_cell_id": "c2", "source": "new = 1"}),
            tool_call("d1", "delete_cell", {"cell_id": "c3"}),
        ),
        text_reply("Done."),
    )
    try:
        assert loop.run("Hello.").outcome == "completed"
        assert loop.run("Change the cells.").outcome == "completed"
    finally:
        loop.close()
        store.close()
        provider.close()
    return path


def rewind(path: Path, tmp_path: Path, notebook: Any, *, force: bool = False) -> tuple[str, str]:
    """Rewind to before run 2: the plan's text and what the rewind recorded."""
    files = FileStore.for_session("s", tmp_path / "state")
    with SessionStore.open(path) as store:
        state = store.load()
        target = operation_numbered(state, 2)
        plan = plan_rewind(state, target, files, tmp_path, force=force, notebook=notebook)
        carry_out(store, plan, files, tmp_path, notebook)
        detail = list(store.load().operations.values())[-1].detail or ""
    return plan.text(), detail


def test_the_cells_the_agent_changed_are_restored_in_place(
    server: OpenAIServer, tmp_path: Path
) -> None:
    notebook = FakeNotebook(*SOURCES, own="c0")
    path = agent_changes_cells(server, tmp_path, notebook)
    inserted = next(c.id for c in notebook.cells if c.source == "new = 1")
    assert [c.source for c in notebook.cells] == ["%%agent", "a = 10\nprint(a)", "b = 2", "new = 1"]
    text, detail = rewind(path, tmp_path, notebook)
    assert "  cells to restore (3):" in text
    deleted = "bring back the cell the agent deleted (1 line(s): c = 3) (id c3)"
    assert f"    deleted cell (was 5 of 5): {deleted}" in text
    assert (
        f"cell 4 of 4: remove the cell the agent inserted (1 line(s): new = 1) (id {inserted})"
        in text
    )
    assert "cell 2 of 4: put back its source before (+1 -2 lines; 1 line(s): a = 1) (id c1)" in text
    assert [(c.id, c.source) for c in notebook.cells] == [
        (f"c{i}", s) for i, s in enumerate(SOURCES)
    ]
    assert detail.count(": restored") == 3
    # The notebook as it was: a second rewind has nothing left to do.
    text, _ = rewind(path, tmp_path, notebook)
    assert "cells already as they were (3):" in text


def test_a_cell_changed_since_is_a_conflict_left_unless_forced(
    server: OpenAIServer, tmp_path: Path
) -> None:
    notebook = FakeNotebook(*SOURCES, own="c0")
    path = agent_changes_cells(server, tmp_path, notebook)
    notebook.cells[1] = replace(notebook.cells[1], source="a = 99")
    text, detail = rewind(path, tmp_path, notebook)
    assert "cell conflicts, left as they are" in text
    assert "cell 2 of 4: changed since the agent's last change; left as it is (id c1)" in text
    assert notebook.source("c1") == "a = 99"
    assert notebook.source("c3") == "c = 3"  # the others are restored
    assert detail.count(": restored") == 2
    text, _ = rewind(path, tmp_path, notebook, force=True)
    assert "(--force: changed since the agent's last change)" in text
    assert notebook.source("c1") == "a = 1"


def test_a_change_made_between_the_plan_and_its_restore_is_not_overwritten(
    server: OpenAIServer, tmp_path: Path
) -> None:
    notebook = FakeNotebook(*SOURCES, own="c0")
    path = agent_changes_cells(server, tmp_path, notebook)
    files = FileStore.for_session("s", tmp_path / "state")
    with SessionStore.open(path) as store:
        state = store.load()
        plan = plan_rewind(state, operation_numbered(state, 2), files, tmp_path, notebook=notebook)
        notebook.cells[1] = replace(notebook.cells[1], source="typed meanwhile")
        done = carry_out(store, plan, files, tmp_path, notebook)
    assert any("c1): it changed since the plan; left as it is" in line for line in done.cells)
    assert notebook.source("c1") == "typed meanwhile"


@pytest.mark.parametrize("notebook", [None, FakeNotebook(*SOURCES, live=False)])
def test_without_a_live_notebook_the_cells_are_listed_to_restore_by_hand(
    server: OpenAIServer, tmp_path: Path, notebook: FakeNotebook | None
) -> None:
    path = agent_changes_cells(server, tmp_path, FakeNotebook(*SOURCES, own="c0"))
    text, detail = rewind(path, tmp_path, notebook)
    assert "  cells the agent changed (restore them by hand: no live notebook) (3):" in text
    assert "cell 2 of 4: put back its source before" in text
    assert "cell 4 of 5: remove the cell the agent inserted (1 line(s): new = 1)" in text
    assert ": restored" not in detail
