"""read_notebook and edit_cell in a real kernel that no widget frontend watches (nbclient,
as papermill and a headless run execute a notebook): the saved file is read, the model is
told it is the saved file and not the live notebook; an edit, which no one can accept
there, becomes a proposed cell and the model is told."""

from __future__ import annotations

from pathlib import Path

from tiny_agent_nb.demo import run_notebook

from helpers.kernel_helpers import kernel_env
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply


def test_without_a_widget_frontend_the_saved_file_is_read_and_the_model_told(
    tmp_path: Path, server: OpenAIServer
) -> None:
    import nbformat  # noqa: PLC0415

    workdir = tmp_path / "nb"
    workdir.mkdir()
    path = workdir / "analysis.ipynb"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# Sales", id="title"),
        nbformat.v4.new_code_cell("%load_ext tiny_agent_nb", id="load"),
        nbformat.v4.new_code_cell("%%agent\nWhat does this notebook hold?", id="agent"),
    ]
    nbformat.write(notebook, path)
    server.enqueue(
        tool_calls_reply(tool_call("r1", "read_notebook", {})),
        tool_calls_reply(tool_call("e1", "edit_cell", {"cell_id": "title", "source": "# Q3"})),
        text_reply("A title and an agent cell."),
    )
    env = kernel_env(tmp_path, base_url=server.base_url, notebook=path)
    run_notebook(notebook, cwd=workdir, env=env, timeout=60)

    result = server.requests[-2].body["messages"][-1]
    assert result["role"] == "tool"
    lines = result["content"].split("\n")
    assert lines[0] == (
        "[notebook: 3 cells; from the saved file, NOT the live notebook: no Jupyter frontend "
        "with the notebook answered (a terminal, VS Code, Colab or a headless run), so edits "
        "the user has not saved are missing, and the cells cannot be changed]"
    )
    assert lines[1:4] == ["cell 1 of 3 · id title · markdown", "```markdown", "# Sales"]
    # nbclient does not say which cell it runs (no `cellId`): no cell is claimed as the
    # agent's own on a guess.
    assert lines[9] == "cell 3 of 3 · id agent · code · not run"
    edited = server.requests[-1].body["messages"][-1]
    assert edited["tool_call_id"] == "e1"
    assert edited["content"].startswith("Cell title was not changed: ")
    assert "proposed as a new cell" in edited["content"]
