"""The bridge's protocol in a real kernel, its frontend played over the kernel's channels
as the widget's `initialize` answers (notebook/_bridge.py's ESM): the busy cell gets the
answers through the main shell (the comm pump) or a comm subshell; only the reply to the
request asked counts; a frontend whose widget manager has no notebook (VS Code, Colab)
leaves the saved file read and nothing applied. The real frontends are
test_browser_notebook_bridge.py's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.widget_frontend import Cell, WidgetFrontend

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

LIVE_CELLS = [
    {"id": "a", "cell_type": "markdown", "source": "# Live", "ran": False},
    {"id": "b", "cell_type": "code", "source": "x = 1  # typed", "ran": False},
]
USE = """\
from tiny_agent_nb.tools import CellChange
bridge = get_ipython().magics_manager.registry["AgentMagics"].runtime.loops.notebook
seen = bridge.read()
print("LIVE", seen.live, [(c.id, c.source) for c in seen.cells])
print("APPLY", bridge.apply(CellChange("edit", "b", "x = 1  # typed", "x = 2")))"""


def bridge_messages(ui: WidgetFrontend, cell: Cell) -> Iterator[tuple[str, dict[str, Any]]]:
    """Until `cell` finishes: ("open", content) when the bridge's comm opens, then
    ("request", content) for each of its messages to the frontend."""
    bridge: str | None = None
    while not cell.finished:
        try:
            msg = ui.kc.get_iopub_msg(timeout=0.2)
        except Exception:
            continue
        ui._absorb(msg)
        kind, content = msg["header"]["msg_type"], msg["content"]
        if kind == "comm_open" and "sharedNotebook" in str(content["data"].get("state", {})):
            bridge = content["comm_id"]
            yield "open", content
        elif kind == "comm_msg" and content["comm_id"] == bridge:
            yield "request", content


def answer(ui: WidgetFrontend, cell: Cell, *, reachable: bool) -> list[dict[str, Any]]:
    """Play the widget's frontend until `cell` finishes; the kernel's requests."""
    requests: list[dict[str, Any]] = []
    for kind, content in bridge_messages(ui, cell):
        bridge = content["comm_id"]
        if kind == "open":
            send(ui, bridge, {"op": "hello", "frontend": "f1", "reachable": reachable})
        else:
            request = content["data"].get("content", {})
            requests.append(request)
            reply = {"op": "reply", "id": request["id"], "frontend": "f1", "reachable": reachable}
            # A reply to a request never asked, and one from a frontend with no notebook,
            # before the real one: neither is taken.
            send(ui, bridge, {**reply, "id": 999, "reachable": True, "outcome": "applied"})
            send(ui, bridge, {**reply, "frontend": "f2", "reachable": False})
            if reachable and request["op"] == "read":
                reply["cells"] = LIVE_CELLS
            elif reachable:
                reply["outcome"] = "applied"
            send(ui, bridge, reply)
    ui.finish(cell)
    return requests


def send(ui: WidgetFrontend, comm_id: str, content: dict[str, Any]) -> None:
    ui._custom(ui.models[comm_id], content)


@pytest.mark.parametrize("route", ["main shell", "comm subshell"])
def test_the_running_cell_reads_and_changes_the_live_notebook(
    start_kernel: StartKernel, route: str
) -> None:
    ui = WidgetFrontend(start_kernel(shared="widgets"))
    if route == "comm subshell":
        ui.use_comm_subshell()
    ui.finish(ui.send("%load_ext tiny_agent_nb"))
    cell = ui.send(USE)
    requests = answer(ui, cell, reachable=True)
    assert "LIVE True [('a', '# Live'), ('b', 'x = 1  # typed')]" in cell.stdout
    assert "APPLY applied" in cell.stdout
    assert [r["op"] for r in requests] == ["read", "apply"]
    # The change goes to the frontend that answered, as the change's fields.
    assert requests[1]["frontend"] == "f1"
    assert requests[1]["change"] == {
        "action": "edit",
        "cell_id": "b",
        "old_source": "x = 1  # typed",
        "new_source": "x = 2",
        "cell_type": "code",
        "position": None,
        "new_cell_id": None,
    }


def test_a_frontend_without_the_notebook_leaves_the_saved_file_and_nothing_applied(
    start_kernel: StartKernel, workspace: Path
) -> None:
    saved = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [{"id": "s", "cell_type": "code", "source": "saved = 1", "metadata": {}}],
    }
    (workspace / "analysis.ipynb").write_text(json.dumps(saved))
    ui = WidgetFrontend(start_kernel(shared="widgets"))
    ui.finish(ui.send("%load_ext tiny_agent_nb"))
    cell = ui.send(USE)
    answer(ui, cell, reachable=False)
    assert "LIVE False [('s', 'saved = 1')]" in cell.stdout
    assert "APPLY unreachable" in cell.stdout


def test_a_frontend_that_says_hello_and_never_answers_costs_one_bounded_wait(
    start_kernel: StartKernel, workspace: Path
) -> None:
    """A page closed after its hello: the read waits for its answer once, then reads the
    saved file; the page is forgotten, so the change after it waits for no reply, only
    out the first contact's FIRST_CONTACT from the widget's opening. (In this kernel, its
    own, the reply's wait is 1 s and the first contact's 3 s, not 10 s each: what is
    waited for, and how often, is the same.)"""
    saved = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
    (workspace / "analysis.ipynb").write_text(json.dumps(saved))
    ui = WidgetFrontend(start_kernel())  # its own: it shortens the bridge's waits in it
    ui.finish(ui.send("%load_ext tiny_agent_nb"))
    shorter = "import tiny_agent_nb.notebook._bridge as b\nb.REPLY_TIMEOUT, b.FIRST_CONTACT = 1, 3"
    ui.finish(ui.send(shorter))
    cell = ui.send(USE)
    requests: list[dict[str, Any]] = []
    for kind, content in bridge_messages(ui, cell):
        if kind == "open":
            send(ui, content["comm_id"], {"op": "hello", "frontend": "f1", "reachable": True})
        else:
            requests.append(content["data"]["content"])
    ui.finish(cell)
    assert "LIVE False []" in cell.stdout
    assert "APPLY unreachable" in cell.stdout
    assert [r["op"] for r in requests] == ["read"]


def test_where_two_notebooks_share_the_kernel_the_one_named_after_its_file_is_read(
    start_kernel: StartKernel,
) -> None:
    """A JupyterLab notebook switched to another's kernel: both pages answer; this
    kernel's notebook (analysis.ipynb, from JPY_SESSION_NAME) is asked, the other is not."""
    ui = WidgetFrontend(start_kernel(shared="widgets"))
    ui.finish(ui.send("%load_ext tiny_agent_nb"))
    cell = ui.send(USE)
    pages = {"f0": ("other.ipynb", [LIVE_CELLS[0]]), "f1": ("work/analysis.ipynb", LIVE_CELLS)}
    requests: list[dict[str, Any]] = []
    for kind, content in bridge_messages(ui, cell):
        if kind == "open":
            for name, (path, _) in pages.items():
                hello = {"op": "hello", "frontend": name, "path": path, "reachable": True}
                send(ui, content["comm_id"], hello)
        else:
            request = content["data"]["content"]
            requests.append(request)
            for name, (_, cells) in pages.items():
                if request["frontend"] in (None, name):
                    reply = {"op": "reply", "id": request["id"], "frontend": name}
                    reply.update(reachable=True, cells=cells, outcome="applied")
                    send(ui, content["comm_id"], reply)
    ui.finish(cell)
    assert "LIVE True [('a', '# Live'), ('b', 'x = 1  # typed')]" in cell.stdout
    assert "APPLY applied" in cell.stdout
    assert [r["frontend"] for r in requests] == ["f1", "f1"]
