"""A renamed, moved or duplicated notebook keeps its conversation (docs/spec.md §10): the
link its outputs keep leads `%load_ext` to the session it had, which is renamed after it,
or forked for a copy, never written by two notebooks. The notebook is untrusted: a link
leads nowhere but to a session file of its own id beside it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.notebook._links import (
    LINK_MIME,
    SessionLocation,
    follow_notebook,
    newest_link,
    session_file_for,
)
from tiny_agent_nb.notebook._opening import record_kernel
from tiny_agent_nb.session import (
    HeaderInit,
    SessionStore,
    fork_session,
    load_session,
    read_header,
)

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply
from helpers.scenario import complete_run

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers


def _session(path: Path, runs: int = 2) -> str:
    init = HeaderInit(cwd=str(path.parent), provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        for n in range(runs):
            complete_run(store, f"question {n}")
        return store.header.id


def _notebook(path: Path, *links: dict[str, Any]) -> Path:
    """A saved notebook whose outputs hold these links (and an unrelated output)."""
    outputs: list[dict[str, Any]] = [{"output_type": "stream", "name": "stdout", "text": "hi"}]
    outputs += [
        {"output_type": "display_data", "data": {LINK_MIME: link}, "metadata": {}} for link in links
    ]
    cell = {"cell_type": "code", "id": "c1", "metadata": {}, "source": "", "outputs": outputs}
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(notebook), encoding="utf-8")
    return path


def _link(session: str, file: str, at: int = 1) -> dict[str, Any]:
    return {"session": session, "file": file, "at": at}


def _location(notebook: Path) -> SessionLocation:
    return SessionLocation(session_file_for(notebook), "JPY_SESSION_NAME", notebook=notebook)


def test_a_renamed_notebook_takes_its_session_along(tmp_path: Path) -> None:
    old = tmp_path / "Untitled.agent.jsonl"
    session = _session(old)
    before = old.read_bytes()
    notebook = _notebook(tmp_path / "analysis.ipynb", _link(session, old.name))

    said = follow_notebook(_location(notebook), tmp_path)
    assert said == (
        "tiny-agent-nb: this notebook was renamed or moved: its session "
        "Untitled.agent.jsonl is now analysis.agent.jsonl."
    )
    new = tmp_path / "analysis.agent.jsonl"
    assert new.read_bytes() == before and not old.exists()
    assert follow_notebook(_location(notebook), tmp_path) is None  # found by name from now on


def test_a_notebook_moved_out_of_its_kernels_directory_takes_its_session_along(
    tmp_path: Path,
) -> None:
    """A restarted kernel keeps the directory it started in: the session is found there."""
    kernel_dir, moved_to = tmp_path / "work", tmp_path / "work" / "reports"
    moved_to.mkdir(parents=True)
    session = _session(kernel_dir / "analysis.agent.jsonl")
    notebook = _notebook(moved_to / "analysis.ipynb", _link(session, "analysis.agent.jsonl"))
    assert "renamed or moved" in (follow_notebook(_location(notebook), kernel_dir) or "")
    assert read_header(moved_to / "analysis.agent.jsonl").id == session


def test_a_duplicated_notebook_gets_a_fork_and_the_original_is_untouched(tmp_path: Path) -> None:
    original = tmp_path / "analysis.agent.jsonl"
    session = _session(original)
    link = _link(session, original.name)
    _notebook(tmp_path / "analysis.ipynb", link)
    copy = _notebook(tmp_path / "analysis-Copy1.ipynb", link)
    before = original.read_bytes()

    said = follow_notebook(_location(copy), tmp_path)
    assert said == (
        "tiny-agent-nb: this notebook is a copy of analysis.ipynb: its conversation goes on "
        "in a fork, analysis-Copy1.agent.jsonl; analysis.agent.jsonl stays the other "
        "notebook's."
    )
    assert original.read_bytes() == before
    fork = load_session(tmp_path / "analysis-Copy1.agent.jsonl")
    source = load_session(original)
    assert fork.header.id != session and fork.facts == source.facts
    assert fork.header.model_copy(update={"id": session, "createdAt": 0}) == (
        source.header.model_copy(update={"createdAt": 0})
    )


def test_a_copy_whose_original_kernel_writes_the_session_gets_a_fork(tmp_path: Path) -> None:
    original = tmp_path / "Untitled.agent.jsonl"
    session = _session(original)
    copy = _notebook(tmp_path / "Untitled-Copy1.ipynb", _link(session, original.name))
    with SessionStore.open(original) as writer:  # the original's kernel, still running
        said = follow_notebook(_location(copy), tmp_path)
        assert said is not None and "a copy of a notebook whose kernel writes it" in said
        assert writer.path == original and original.exists()
    assert (
        load_session(tmp_path / "Untitled-Copy1.agent.jsonl").facts == load_session(original).facts
    )


def test_the_newest_link_wins(tmp_path: Path) -> None:
    first = _session(tmp_path / "old.agent.jsonl")
    second = _session(tmp_path / "newer.agent.jsonl")
    notebook = _notebook(
        tmp_path / "x.ipynb",
        _link(second, "newer.agent.jsonl", at=20),
        _link(first, "old.agent.jsonl", at=10),
    )
    link = newest_link(notebook)
    assert link is not None and (link.session, link.file) == (second, "newer.agent.jsonl")


@pytest.mark.parametrize(
    "file",
    [
        "../outside.agent.jsonl",
        "sub/outside.agent.jsonl",
        ".hidden.agent.jsonl",
        "outside.jsonl",
        "x" * 250 + ".agent.jsonl",
    ],
)
def test_a_link_never_leads_outside_the_notebooks_directory(tmp_path: Path, file: str) -> None:
    folder = tmp_path / "nb"
    (folder / "sub").mkdir(parents=True)
    outside = tmp_path / "outside.agent.jsonl"
    session = _session(outside)
    if len(file) < 255 and not file.startswith(".."):
        shutil.copyfile(outside, folder / file)  # the very session, where the link says
    notebook = _notebook(folder / "analysis.ipynb", _link(session, file))
    assert newest_link(notebook) is None
    assert follow_notebook(_location(notebook), folder) is None
    assert not (folder / "analysis.agent.jsonl").exists() and outside.exists()


def test_a_link_to_a_file_holding_another_session_or_a_symlink_is_not_followed(
    tmp_path: Path,
) -> None:
    other = _session(tmp_path / "other.agent.jsonl")
    _session(tmp_path / "Untitled.agent.jsonl")  # not the session the link names
    (tmp_path / "alias.agent.jsonl").symlink_to(tmp_path / "other.agent.jsonl")
    for file in ("Untitled.agent.jsonl", "alias.agent.jsonl", "missing.agent.jsonl"):
        notebook = _notebook(tmp_path / "analysis.ipynb", _link(other, file))
        assert "renamed" not in (follow_notebook(_location(notebook), tmp_path) or "")
    assert not (tmp_path / "analysis.agent.jsonl").exists()
    assert (tmp_path / "Untitled.agent.jsonl").exists()


def test_without_a_link_the_new_session_names_the_sessions_no_notebook_owns(
    tmp_path: Path,
) -> None:
    _session(tmp_path / "Untitled.agent.jsonl")
    _session(tmp_path / "owned.agent.jsonl")
    (tmp_path / "owned.ipynb").write_text("{}")
    (tmp_path / "Untitled.agent.1.jsonl").write_text("")  # an archive of `%agent new`
    notebook = _notebook(tmp_path / "analysis.ipynb")
    assert follow_notebook(_location(notebook), tmp_path) == (
        "tiny-agent-nb: Untitled.agent.jsonl beside this notebook belongs to no notebook: "
        "`%agent session Untitled.agent.jsonl` continues it."
    )


def test_a_notebook_whose_session_is_there_follows_nothing(tmp_path: Path) -> None:
    session = _session(tmp_path / "analysis.agent.jsonl")
    _session(tmp_path / "Untitled.agent.jsonl")
    notebook = _notebook(tmp_path / "analysis.ipynb", _link(session, "Untitled.agent.jsonl"))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert follow_notebook(_location(notebook), tmp_path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_fork_never_replaces_a_file_and_leaves_no_draft(tmp_path: Path) -> None:
    source = tmp_path / "a.agent.jsonl"
    _session(source)
    with source.open("ab") as file:
        file.write(b'{"kind":"entry"')  # a torn tail: not copied
    target = tmp_path / "b.agent.jsonl"
    target.write_text("mine")
    with pytest.raises(FileExistsError):
        fork_session(source, target)
    assert target.read_text() == "mine"
    target.unlink()
    fork_session(source, target)
    assert load_session(target).torn_tail_bytes == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.agent.jsonl", "b.agent.jsonl"]


def test_a_kernel_leaves_the_link_in_its_cells_outputs(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    kernel = start_kernel(shared=True)
    loaded = kernel.execute("%load_ext tiny_agent_nb")
    (link,) = [d[LINK_MIME] for d in loaded.displays if LINK_MIME in d]
    session = workspace / "analysis.agent.jsonl"
    assert link["session"] == read_header(session).id and link["file"] == session.name
    assert set(link) == {"session", "file", "at"}
    assert not any("text/plain" in d for d in loaded.displays if LINK_MIME in d)  # not shown
    server.enqueue(text_reply("ok"))
    ran = kernel.execute("%%agent\nhi")
    assert [d[LINK_MIME]["session"] for d in ran.displays if LINK_MIME in d] == [link["session"]]


def test_a_link_to_a_session_another_notebook_opened_by_path_gets_a_fork(
    tmp_path: Path,
) -> None:
    """`other.ipynb` ran `%agent session notes.agent.jsonl`: the file is that notebook's
    though no `notes.ipynb` exists. A notebook whose link names it (received, or a copy
    of one that opened it) gets a fork; the file stays where the other notebook finds it."""
    shared = tmp_path / "notes.agent.jsonl"
    session = _session(shared)
    (tmp_path / "other.ipynb").write_text("{}")
    explicit = SessionLocation(shared, "explicit", notebook=tmp_path / "other.ipynb")
    with SessionStore.open(shared) as store:  # what other.ipynb's kernel recorded, then closed
        record_kernel(store, explicit.notebook)
    received = _notebook(tmp_path / "received.ipynb", _link(session, shared.name))
    before = shared.read_bytes()

    said = follow_notebook(_location(received), tmp_path)
    assert said == (
        "tiny-agent-nb: this notebook is linked to the session other.ipynb opened: its "
        "conversation goes on in a fork, received.agent.jsonl; notes.agent.jsonl stays the "
        "other notebook's."
    )
    assert shared.read_bytes() == before
    fork = load_session(tmp_path / "received.agent.jsonl")
    assert fork.header.id != session
    # once that notebook is gone, the session is no other notebook's: renamed after this one
    (tmp_path / "other.ipynb").unlink()
    (tmp_path / "received.agent.jsonl").unlink()
    assert "renamed or moved" in (follow_notebook(_location(received), tmp_path) or "")
    assert read_header(tmp_path / "received.agent.jsonl").id == session and not shared.exists()


def test_a_notebook_received_with_a_link_to_a_session_another_kernel_opened_gets_a_fork(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    """Two notebooks, each in a real kernel: `other.ipynb` opens `notes.agent.jsonl` with
    `%agent session` and its kernel ends; a notebook whose link names that session then
    loads. The file is left to the notebook that opened it, its history forked."""
    other = workspace / "other.ipynb"
    other.write_text("{}")
    first = start_kernel(shared=True, extra={"JPY_SESSION_NAME": str(other)})
    first.execute("%load_ext tiny_agent_nb")
    first.execute("%agent session notes.agent.jsonl")
    first.shutdown()
    shared = workspace / "notes.agent.jsonl"
    session = read_header(shared).id
    before = shared.read_bytes()
    received = _notebook(workspace / "received.ipynb", _link(session, shared.name))

    second = start_kernel(shared=True, extra={"JPY_SESSION_NAME": str(received)})
    loaded = second.execute("%load_ext tiny_agent_nb")
    assert "linked to the session other.ipynb opened" in loaded.stdout, loaded.stdout
    assert shared.read_bytes() == before
    assert read_header(workspace / "received.agent.jsonl").id != session
