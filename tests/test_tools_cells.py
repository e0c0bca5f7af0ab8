"""edit_cell, insert_cell, delete_cell on a notebook held in memory: the cell's source is read
before the call is recorded, nothing changes without the user's Accept, a cell changed
since the diff is refused, agent cells are not the model's, and where the notebook cannot
be changed the new source is proposed as a cell instead, the model told which."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.tools import ToolContext, ToolError, builtin_registry, change_diff
from tiny_agent_nb.tools._cells import MAX_DIFF_CHARACTERS, DeleteCell, EditCell, InsertCell

from helpers.fake_notebook import FakeNotebook

EDIT, INSERT, DELETE = EditCell(), InsertCell(), DeleteCell()


def context(
    notebook: FakeNotebook | None,
    review: Callable[[], bool] | None = lambda: True,
    proposed: list[str] | None = None,
) -> ToolContext:
    def propose(code: str) -> str:
        if proposed is None:
            raise ToolError("no notebook to put a cell in")
        proposed.append(code)
        return "below the agent cell"

    return ToolContext(Path("/"), notebook=notebook, review=review, propose_cell=propose)


def call(tool: Any, arguments: dict[str, Any], ctx: ToolContext) -> tuple[dict[str, Any], Any]:
    """As the loop calls it: effective arguments, prepared (recorded), then run."""
    prepared = tool.prepare(tool.effective_arguments(arguments), ctx)
    return prepared, tool.run(prepared, ctx)


def test_the_three_tools_are_built_in_never_replayed_and_not_asked_by_approve() -> None:
    registry = builtin_registry()
    for name in ("edit_cell", "insert_cell", "delete_cell"):
        tool = registry.get(name)
        assert tool is not None
        assert tool.replay_policy == "never"
        assert not tool.asks_approval  # the diff is asked about whatever --approve says
        assert not {"old_source", "cell_number", "cell_count"} & set(
            tool.schema().parameters["properties"]
        )


def test_an_accepted_edit_is_recorded_with_both_sources_and_applied_unrun() -> None:
    notebook = FakeNotebook("x = 1", "y = x + 1")
    recorded, output = call(EDIT, {"cell_id": "c1", "source": "y = x + 2\r\n"}, context(notebook))
    assert recorded == {
        "cell_id": "c1",
        "source": "y = x + 2\n",
        "cell_number": 2,
        "cell_count": 2,
        "old_source": "y = x + 1",
    }
    assert not output.is_error, output.content
    assert notebook.source("c1") == "y = x + 2\n"
    assert "(it has not run)" in output.content


def test_a_rejected_edit_changes_nothing_and_reads_as_denied() -> None:
    notebook = FakeNotebook("x = 1")
    _, output = call(EDIT, {"cell_id": "c0", "source": "x = 2"}, context(notebook, lambda: False))
    assert (output.is_error, output.denied) == (True, True)
    assert output.content == "The user rejected this change; cell c0 is unchanged."
    assert notebook.applied == []


def test_a_cell_the_user_changed_between_diff_and_accept_is_refused() -> None:
    notebook = FakeNotebook("x = 1")

    def user_types_then_accepts() -> bool:
        notebook.cells[0] = notebook.cells[0].__class__("c0", "code", "x = 10", False)
        return True

    _, output = call(
        EDIT, {"cell_id": "c0", "source": "x = 2"}, context(notebook, user_types_then_accepts)
    )
    assert output.is_error and not output.denied
    assert output.content.startswith("cell c0 changed since the diff was made; nothing was")
    assert notebook.source("c0") == "x = 10"


def test_insert_and_delete_are_applied_on_accept() -> None:
    notebook = FakeNotebook("a", "b")
    recorded, output = call(
        INSERT,
        {"after_cell_id": "c0", "source": "# Notes", "cell_type": "markdown"},
        context(notebook),
    )
    assert recorded == {
        "after_cell_id": "c0",
        "source": "# Notes",
        "cell_type": "markdown",
        "cell_number": 1,
        "cell_count": 2,
        "new_cell_id": notebook.cells[1].id,  # chosen before the intent: a rewind finds it
    }
    assert "A new markdown cell was inserted after cell c0" in output.content
    assert [c.source for c in notebook.cells] == ["a", "# Notes", "b"]
    recorded, output = call(DELETE, {"cell_id": "c1"}, context(notebook))
    # Where a rewind puts it back: after the cell it followed, with its type.
    assert recorded == {
        "cell_id": "c1",
        "cell_number": 3,
        "cell_count": 3,
        "old_source": "b",
        "previous_cell_id": notebook.cells[1].id,
        "old_cell_type": "code",
    }
    assert output.content == "The user accepted the change. Cell c1 was deleted."
    assert [c.source for c in notebook.cells] == ["a", "# Notes"]


@pytest.mark.parametrize(
    ("tool", "arguments", "refusal"),
    [
        (EDIT, {"cell_id": "c0", "source": "x"}, "cell c0 is the running agent cell"),
        (DELETE, {"cell_id": "c1"}, "cell c1 is an %%agent cell, the user's"),
        # IPython runs the agent behind other cell magics too.
        (EDIT, {"cell_id": "c3", "source": "x"}, "cell c3 is an %%agent cell, the user's"),
        (DELETE, {"cell_id": "c4"}, "cell c4 is an %%agent cell, the user's"),
        (EDIT, {"cell_id": "c9", "source": "x"}, "the notebook has no cell c9"),
        (INSERT, {"after_cell_id": "c2", "source": " %%agent\nhi"}, "is an %%agent cell"),
        (INSERT, {"after_cell_id": "c2", "source": "\n%%time\n %%agent\nhi"}, "is an %%agent"),
        (EDIT, {"cell_id": "c2", "source": "%%capture out\n%%agent -h\nhi"}, "is an %%agent"),
        (EDIT, {"cell_id": "c2", "source": "ok\u202e = 1"}, "U+202E at line 1"),
        (EDIT, {"cell_id": "c2", "source": "x = 1"}, "cell c2 already holds this source"),
        (EDIT, {"cell_id": "c2", "source": "x = 1" + " " * 120 + "; y"}, "wider than the 100"),
    ],
)
def test_a_change_the_model_may_not_make_is_refused_before_it_is_recorded(
    tool: Any, arguments: dict[str, Any], refusal: str
) -> None:
    notebook = FakeNotebook(
        "%%agent\nhello",
        "\n%%agent --model m\nagain",
        "x = 1",
        "%%time\n%%agent\nagain",
        "\n  \n%%capture out\n  %%time\n\n%%agent --demo\nonce more",
        own="c0",
    )
    with pytest.raises(ToolError, match="nothing was changed") as raised:
        tool.prepare(tool.effective_arguments(arguments), context(notebook))
    assert refusal in str(raised.value)


def test_a_cell_too_long_to_review_is_not_deleted() -> None:
    notebook = FakeNotebook("x = 1\n" * (MAX_DIFF_CHARACTERS // 4))
    with pytest.raises(ToolError, match=r"more than the .* a user can review"):
        DELETE.prepare({"cell_id": "c0"}, context(notebook))


@pytest.mark.parametrize(
    "source",
    [
        "x = 1\n%%agent",  # not a magic: the cell runs as Python
        "%time\n%%agent\nhi",  # a line magic first: IPython does not run this at all
        "# %%agent",
    ],
)
def test_a_cell_that_is_not_an_agent_cell_may_be_changed(source: str) -> None:
    notebook = FakeNotebook(source)
    _, output = call(EDIT, {"cell_id": "c0", "source": "x = 2"}, context(notebook))
    assert not output.is_error, output.content


def test_what_the_model_sends_for_the_cell_it_read_is_replaced_by_what_the_notebook_holds() -> None:
    notebook = FakeNotebook("a", "secret = 1")
    forged = {"old_source": "anything", "cell_number": 9, "cell_count": 9}
    recorded, _ = call(EDIT, {"cell_id": "c1", "source": "x", **forged}, context(notebook))
    assert (recorded["old_source"], recorded["cell_number"], recorded["cell_count"]) == (
        "secret = 1",
        2,
        2,
    )
    # Where no notebook is read, nothing of it is recorded from the model either.
    recorded, _ = call(EDIT, {"cell_id": "c1", "source": "x", **forged}, context(None, None, []))
    assert recorded == {"cell_id": "c1", "source": "x"}


@pytest.mark.parametrize("where", ["no notebook", "unreachable", "no one to ask"])
def test_where_the_notebook_cannot_be_changed_an_edit_is_proposed_as_a_new_cell(
    where: str,
) -> None:
    notebook = None if where == "no notebook" else FakeNotebook("x = 1", reachable=False)
    proposed: list[str] = []
    review = None if where == "no one to ask" else lambda: True
    _, output = call(
        EDIT, {"cell_id": "c0", "source": "x = 2"}, context(notebook, review, proposed)
    )
    assert proposed == ["x = 2"]
    assert not output.is_error
    assert output.content.startswith("Cell c0 was not changed: ")
    assert "proposed as a new cell below the agent cell instead; it has not run" in output.content


def test_a_delete_that_cannot_be_applied_tells_the_model_to_ask_the_user() -> None:
    _, output = call(DELETE, {"cell_id": "c0"}, context(FakeNotebook("x", reachable=False)))
    assert output.is_error
    assert "nothing was changed. Ask the user to make the change to cell c0." in output.content


def test_a_review_that_cannot_be_asked_falls_back_to_a_proposal() -> None:
    def no_stdin() -> bool:
        raise ToolError("no one can be asked to accept a diff here")

    proposed: list[str] = []
    _, output = call(
        INSERT,
        {"after_cell_id": "c0", "source": "y"},
        context(FakeNotebook("x"), no_stdin, proposed),
    )
    assert proposed == ["y"]
    assert "no one can be asked to accept a diff here" in output.content


def test_the_diff_is_a_unified_diff_of_the_recorded_call_naming_the_cell_by_place() -> None:
    """The user never sees a cell's id (JupyterLab's are UUIDs): the diff says where the
    cell is, as read, with the id beside it."""
    place = {"cell_number": 3, "cell_count": 10}
    recorded = {"cell_id": "c3", "source": "a\nB\nc", "old_source": "a\nb\nc", **place}
    assert change_diff("edit_cell", recorded) == (
        "cell 3 of 10 (id c3)\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c"
    )
    assert change_diff("delete_cell", {"cell_id": "c3", "old_source": "x", **place}) == (
        "cell 3 of 10 (id c3), deleted\n@@ -1 +0,0 @@\n-x"
    )
    assert change_diff("insert_cell", {"after_cell_id": "c3", "source": "y", **place}) == (
        "new code cell after cell 3 of 10 (id c3)\n@@ -0,0 +1 @@\n+y"
    )
    assert change_diff("bash", {"command": "ls"}) is None


def test_a_call_recorded_without_the_cell_s_place_still_shows_its_diff() -> None:
    recorded = {"cell_id": "c3", "source": "a\nB\nc", "old_source": "a\nb\nc"}
    assert change_diff("edit_cell", recorded) == "cell c3\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c"
    assert change_diff("delete_cell", {"cell_id": "c3", "old_source": "x"}) == (
        "cell c3, deleted\n@@ -1 +0,0 @@\n-x"
    )
    assert change_diff("insert_cell", {"after_cell_id": "c3", "source": "y"}) == (
        "new code cell after cell c3\n@@ -0,0 +1 @@\n+y"
    )


KEY = "sk-test-0123456789abcdef"


@pytest.mark.parametrize(
    ("source", "refusal"),
    [
        # The model reads the key as [redacted] and writes that back: the diff, made from
        # the redacted record, would show the key's line unchanged while Accept replaced
        # the key with the text "[redacted]".
        ('KEY = "[redacted]"\nx = 2', "holds a secret"),
        # A key the model writes in is shown as [redacted]: the user cannot read it.
        (f'KEY = "{KEY}"\nx = 2', "the new source holds a secret"),
    ],
)
def test_a_change_whose_diff_would_hide_a_secret_is_refused(source: str, refusal: str) -> None:
    notebook = FakeNotebook(f'KEY = "{KEY}"\nx = 1')
    ctx = replace(context(notebook), secrets=(KEY,))
    with pytest.raises(ToolError, match="nothing was changed") as raised:
        EDIT.prepare(EDIT.effective_arguments({"cell_id": "c0", "source": source}), ctx)
    assert refusal in str(raised.value)
    assert notebook.applied == []


def test_a_cell_holding_a_secret_may_lose_the_line_as_the_diff_shows() -> None:
    notebook = FakeNotebook(f'KEY = "{KEY}"\nx = 1')
    ctx = replace(context(notebook), secrets=(KEY,))
    _, output = call(EDIT, {"cell_id": "c0", "source": "x = 2"}, ctx)
    assert not output.is_error, output.content
    assert notebook.source("c0") == "x = 2"


def test_an_apply_the_notebook_did_not_answer_may_have_been_applied() -> None:
    class Silent(FakeNotebook):
        def apply(self, change: Any) -> Any:
            return "unanswered"

    proposed: list[str] = []
    _, output = call(
        EDIT, {"cell_id": "c0", "source": "x = 2"}, context(Silent("x = 1"), proposed=proposed)
    )
    assert proposed == []  # not a second copy of a change that may be in the cell
    assert output.is_error
    assert "may have been applied" in output.content


def test_a_diff_too_long_as_shown_is_refused_before_it_is_asked_about() -> None:
    """Hidden characters in the user's cell are shown as escapes (`\\u200b`, 6 each): a
    diff short in characters but too long on screen was denied unseen by the question,
    and the model told the user had rejected it."""
    notebook = FakeNotebook("\u200b" * (MAX_DIFF_CHARACTERS // 3))
    with pytest.raises(ToolError, match=r"more than the .* a user can review"):
        DELETE.prepare({"cell_id": "c0"}, context(notebook))
