"""A frontend's side of the widget protocol, over a real kernel's channels.

    frontend = WidgetFrontend(kernel)                 # a tests/helpers/kernel_helpers.Kernel
    cell = frontend.send("%%agent --approve ask\\n...")  # stdin allowed, as JupyterLab sends
    allow = frontend.wait_for_button(cell, "Allow")
    frontend.click(allow)                             # a comm_msg, as a button's click
    frontend.press_key(allow.model, "Escape")         # a key, as the question sends it
    frontend.finish(cell)
    cell.outputs()                                    # what a saved notebook keeps

It keeps what a frontend keeps: the widget models the kernel opened (their state, kept
current by the kernel's updates, forgotten when closed) and each cell's outputs, a
display replaced in place when an update names its display id (as JupyterLab's output
area does, also for an output of an earlier cell). A click goes to the main shell, as
JupyterLab 4.3 or a frontend without comm subshells sends it, or, after
`use_comm_subshell()`, on a subshell of its own, as JupyterLab 4.4+ sends it.

The approval question is one widget (notebook/_keyed_buttons.py) that draws its buttons
itself: each of them is a `Choice` of its model, clicked with the message its view
sends, and a key it answers to is sent as its view sends it (`press_key`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from queue import Empty
from typing import Any

from helpers.kernel_helpers import EXECUTE_TIMEOUT, Kernel

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@dataclass
class Cell:
    msg_id: str
    outputs_by_id: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)
    stdout: str = ""
    finished: bool = False
    reply: dict[str, Any] | None = None  # its execute_reply's content, once read

    def outputs(self) -> list[dict[str, Any]]:
        """The cell's outputs as a saved notebook holds them: each display as last drawn."""
        return [data for _, data in self.outputs_by_id]

    def text(self) -> str:
        """What a reader sees as text: the streams, and each output's text/plain."""
        return self.stdout + "\n".join(d.get("text/plain", "") for d in self.outputs())


@dataclass
class Model:
    comm_id: str
    state: dict[str, Any]
    open: bool = True


@dataclass
class Choice:
    """A button a keyed-buttons widget draws (its model's `buttons`)."""

    model: Model
    choice: str
    label: str


class WidgetFrontend:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.kc = kernel.kc
        self.models: dict[str, Model] = {}
        self.cells: list[Cell] = []
        self.subshell_id: str | None = None
        self._barrier: str | None = None
        self.handled: set[str] = set()  # shell messages the kernel went idle after

    # ---------------------------------------------------------------- channels
    def use_comm_subshell(self) -> str:
        """Create a subshell and send every comm message on it."""
        self.subshell_id = self._create_subshell()
        return self.subshell_id

    def barrier(self) -> None:
        """Return once the kernel has taken in every message sent before (ipykernel 7):
        its shell channel thread reads them in order, so an empty cell run on a subshell
        of its own answers only after the messages before it went where they go (a click
        for the main shell into its queue)."""
        if self._barrier is None:
            self._barrier = self._create_subshell()
        msg = self.kc.session.msg("execute_request", {"code": "", "silent": True})
        msg["header"]["subshell_id"] = self._barrier
        self.kc.shell_channel.send(msg)
        self._shell_reply(msg["header"]["msg_id"])

    def _shell_reply(self, msg_id: str) -> dict[str, Any]:
        """Read shell replies until `msg_id`'s (keeping the cells' on the way)."""
        deadline = time.monotonic() + EXECUTE_TIMEOUT
        while True:
            reply = self.kc.get_shell_msg(timeout=max(deadline - time.monotonic(), 1))
            parent = reply["parent_header"].get("msg_id")
            for cell in self.cells:
                if parent == cell.msg_id:
                    cell.reply = reply["content"]
            if parent == msg_id:
                content: dict[str, Any] = reply["content"]
                return content

    def _create_subshell(self) -> str:
        subshell_id: str = self.control("create_subshell_request")["subshell_id"]
        return subshell_id

    def control(self, msg_type: str, **content: Any) -> dict[str, Any]:
        """A control request's reply content (subshells: create, list, delete)."""
        msg = self.kc.session.msg(msg_type, content)
        self.kc.control_channel.send(msg)
        deadline = time.monotonic() + EXECUTE_TIMEOUT
        while True:
            reply = self.kc.control_channel.get_msg(timeout=max(deadline - time.monotonic(), 1))
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                break
        assert reply["content"]["status"] == "ok", reply["content"]
        answer: dict[str, Any] = reply["content"]
        return answer

    def send(self, code: str) -> Cell:
        cell = Cell(self.kc.execute(code, allow_stdin=True, stop_on_error=False))
        self.cells.append(cell)
        return cell

    def pump(self, timeout: float = 0.2) -> bool:
        """Read one iopub message, if one comes within `timeout`; False if none came."""
        try:
            msg = self.kc.get_iopub_msg(timeout=timeout)
        except Empty:
            if not self.kernel.is_alive():
                raise AssertionError(f"the kernel died; its log:\n{self.kernel.log_text}") from None
            return False
        self._absorb(msg)
        return True

    def until(self, condition: Any, what: str, timeout: float = EXECUTE_TIMEOUT) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout:g} s waiting for {what}; cells: "
                    + "\n---\n".join(c.text() for c in self.cells)
                )
            self.pump()

    def finish(self, cell: Cell, timeout: float = EXECUTE_TIMEOUT) -> Cell:
        """The cell once it is idle and its execute_reply has come, as `Kernel.execute`
        waits: only then may the next request be sent. ipykernel 7.3 (the last for
        Python 3.10) sends a reply from its shell channel thread straight on the shell
        socket, which can leave a request arriving meanwhile unread for good: the kernel
        idle, the cell never started (ipython/ipykernel#1529, fixed in 7.4). The idle
        status can come before the reply is sent; the reply itself comes after."""
        self.until(lambda: cell.finished, f"cell {cell.msg_id} to finish", timeout)
        self.reply(cell)
        return cell

    def execution_count(self, cell: Cell) -> int:
        """The count the kernel gave the cell (its execute_reply)."""
        count: int = self.reply(cell)["execution_count"]
        return count

    def reply(self, cell: Cell) -> dict[str, Any]:
        """The cell's execute_reply's content (its payload: a proposed cell)."""
        return cell.reply if cell.reply is not None else self._shell_reply(cell.msg_id)

    # ---------------------------------------------------------------- widgets
    def buttons(self, description: str) -> list[Model | Choice]:
        found: list[Model | Choice] = []
        for m in self.models.values():
            if m.open and m.state.get("_model_name") == "ButtonModel":
                found += [m] if m.state.get("description") == description else []
            elif m.open:
                found += [c for c in _choices(m) if c.label == description]
        return found

    def questions(self) -> list[Model]:
        """Every approval question the kernel opened (closed ones too), in order."""
        return [m for m in self.models.values() if _choices(m)]

    def wait_for_button(self, description: str, timeout: float = EXECUTE_TIMEOUT) -> Model | Choice:
        """The newest `description` button a cell shows: a user clicks what is on screen.
        A button's comm opens before the kernel has wired it and shown it (its click
        handler, the comm's subshell), so a click on a model merely opened can be lost."""

        def shown() -> list[Model | Choice]:
            on_screen = {id(m) for cell in self.cells for m in self._shown_tree(cell)}
            return [
                b
                for b in self.buttons(description)
                if id(b.model if isinstance(b, Choice) else b) in on_screen
            ]

        found = self.until(shown, f"a {description!r} button shown", timeout)
        return found[-1]

    def _shown_tree(self, cell: Cell) -> list[Model]:
        """The live models a cell shows, with the children of each."""
        found, todo = [], list(self.shown_widgets(cell))
        while todo:
            model = todo.pop(0)
            found.append(model)
            for child in model.state.get("children", []):
                child_id = child.removeprefix("IPY_MODEL_")
                if child_id in self.models and self.models[child_id].open:
                    todo.append(self.models[child_id])
        return found

    def click(self, button: Model | Choice) -> str:
        """Send a click; its msg_id (in `handled` once the kernel has handled it)."""
        if isinstance(button, Choice):
            return self._custom(button.model, {"choice": button.choice})
        return self._custom(button, {"event": "click"})

    def press_key(self, question: Model, key: str) -> str:
        """A key pressed while the question has the focus, as its view sends it."""
        return self._custom(question, {"key": key})

    def _custom(self, model: Model, content: dict[str, Any]) -> str:
        msg = self.kc.session.msg(
            "comm_msg",
            {"comm_id": model.comm_id, "data": {"method": "custom", "content": content}},
        )
        if self.subshell_id is not None:
            msg["header"]["subshell_id"] = self.subshell_id
        self.kc.shell_channel.send(msg)
        msg_id: str = msg["header"]["msg_id"]
        return msg_id

    def shown_widgets(self, cell: Cell) -> list[Model]:
        """The live widget models a cell's outputs show now."""
        ids = [d[WIDGET_VIEW]["model_id"] for d in cell.outputs() if WIDGET_VIEW in d]
        return [self.models[i] for i in ids if i in self.models and self.models[i].open]

    def shown_buttons(self, cell: Cell) -> list[str]:
        """The descriptions of the live buttons a cell's outputs show now, in order."""
        found = []
        for m in self._shown_tree(cell):
            if m.state.get("_model_name") == "ButtonModel":
                found.append(m.state.get("description", ""))
            found += [c.label for c in _choices(m)]
        return found

    # ---------------------------------------------------------------- messages
    def _cell(self, msg: dict[str, Any]) -> Cell | None:
        parent = msg["parent_header"].get("msg_id")
        return next((c for c in self.cells if c.msg_id == parent), None)

    def _absorb(self, msg: dict[str, Any]) -> None:
        kind, content = msg["header"]["msg_type"], msg["content"]
        if kind == "comm_open":
            state = dict(content["data"].get("state", {}))
            self.models[content["comm_id"]] = Model(content["comm_id"], state)
        elif kind == "comm_msg":
            model = self.models.get(content["comm_id"])
            data = content["data"]
            if model is not None and data.get("method") in ("update", "echo_update"):
                model.state.update(data.get("state", {}))
        elif kind == "comm_close":
            model = self.models.get(content["comm_id"])
            if model is not None:
                model.open = False
        elif kind == "update_display_data":
            display_id = content["transient"]["display_id"]
            for cell in self.cells:  # an update reaches a display of any cell
                cell.outputs_by_id = [
                    (i, content["data"] if i == display_id else d) for i, d in cell.outputs_by_id
                ]
        if kind == "status" and content["execution_state"] == "idle":
            self.handled.add(msg["parent_header"].get("msg_id", ""))
        cell = self._cell(msg)
        if cell is None:
            return
        if kind == "stream":
            cell.stdout += content["text"]
        elif kind in ("display_data", "execute_result"):
            display_id = (content.get("transient") or {}).get("display_id")
            cell.outputs_by_id.append((display_id, content["data"]))
        elif kind == "status" and content["execution_state"] == "idle":
            cell.finished = True


def _choices(model: Model) -> list[Choice]:
    """The buttons a keyed-buttons widget (an anywidget) draws; none for another model."""
    if model.state.get("_model_name") != "AnyModel":
        return []
    return [Choice(model, b["choice"], b["label"]) for b in model.state.get("buttons", [])]
