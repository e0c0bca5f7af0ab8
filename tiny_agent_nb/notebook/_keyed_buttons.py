"""Buttons that take the keyboard focus when they appear and answer to keys, as a
dialog's do (an anywidget: ipywidgets has no way to focus a button).

The widget sends `{"choice": c}` for a click (or Enter or Space on a focused button) and
`{"key": k}` for a key of `keymap`; the kernel maps a key to its choice (`keymap`, the one
table), so a key is answered like a click, on whichever shell handles the comm.

The first button takes the focus once shown, unless the user is typing (a cell's editor or
a field holding text): the widget never takes keys meant for code. After a press it gives
the focus back. While it has it, the notebook's one-letter commands (`a` inserts a cell)
do not reach the notebook; keys with Ctrl, Alt or Meta, and Tab, do.

Everything shown is set as text (`textContent`): a call's arguments never become markup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anywidget
import traitlets

ESM = r"""
function labelled(button, text, at) {
  if (!(at >= 0 && at < text.length)) { button.textContent = text; return; }
  const underlined = document.createElement("u");
  underlined.textContent = text.slice(at, at + 1);
  button.append(text.slice(0, at), underlined, text.slice(at + 1));
}

function typing() {
  const active = document.activeElement;
  if (!active) return false;
  const field = active.isContentEditable || ["INPUT", "TEXTAREA"].includes(active.tagName);
  return field && ((active.value ?? active.textContent) || "").trim() !== "";
}

const named = (key) => (key.length === 1 ? key.toUpperCase() : key === "Escape" ? "Esc" : key);

export default {
  render({ model, el }) {
    const keys = model.get("keymap");
    const box = document.createElement("div");
    const text = model.get("text");
    if (text) {
      const pre = document.createElement("pre");
      pre.className = "tex2jax_ignore";
      pre.textContent = text;
      box.append(pre);
    }
    const row = document.createElement("div");
    row.style.cssText = "display:flex;flex-wrap:wrap;gap:4px";
    let previous = null;
    const buttons = model.get("buttons").map(({ choice, label, mark, style }) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "jupyter-widgets jupyter-button widget-button";
      if (style) button.classList.add("mod-" + style);
      button.style.width = "auto";
      const own = Object.keys(keys).filter((k) => keys[k] === choice);
      labelled(button, label, mark);
      if (own.length) button.title = "Key: " + own.map(named).join(" or ");
      button.dataset.choice = choice;
      button.addEventListener("click", () => press({ choice }));
      row.append(button);
      return button;
    });
    box.append(row);
    function press(message) {
      for (const button of buttons) button.disabled = true;
      model.send(message);
      if (previous && previous.isConnected) previous.focus({ preventScroll: true });
      previous = null;
    }
    box.addEventListener("keydown", (event) => {
      if (event.ctrlKey || event.altKey || event.metaKey || event.key === "Tab") return;
      event.stopPropagation();
      const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
      if (key === "Enter") {
        event.preventDefault();
        const choice = event.target.dataset && event.target.dataset.choice;
        if (choice && !event.shiftKey && !event.target.disabled) press({ choice });
      } else if (Object.hasOwn(keys, key) && !buttons[0].disabled) {
        event.preventDefault();
        press({ key });
      }
    });
    el.append(box);
    let frame = 0;
    const appear = () => {
      if (!box.isConnected) { frame = requestAnimationFrame(appear); return; }
      if (buttons.length && !typing()) {
        previous = document.activeElement;
        buttons[0].focus();
      }
    };
    frame = requestAnimationFrame(appear);
    return () => cancelAnimationFrame(frame);
  },
};
"""


@dataclass(frozen=True)
class Button:
    """One button: `choice` is what a press answers; `keys` answer it too; `mark`: the
    index in `label` of the letter underlined (-1: none); `style`: ipywidgets'
    button_style."""

    choice: str
    label: str
    keys: tuple[str, ...] = ()
    style: str = ""
    mark: int = 0


class KeyedButtons(anywidget.AnyWidget):
    """`text` above a row of `buttons`; `on_press(choice)` is called, on whichever
    thread handles the comm's messages, for each click or key the frontend sends."""

    _esm = ESM
    text = traitlets.Unicode("").tag(sync=True)
    buttons = traitlets.List(traitlets.Dict()).tag(sync=True)
    keymap = traitlets.Dict().tag(sync=True)  # key: choice (`keys`: ipywidgets' own)

    def __init__(
        self,
        text: str,
        buttons: Sequence[Button],
        on_press: Callable[[str], None],
    ) -> None:
        super().__init__(
            text=text,
            buttons=[
                {"choice": b.choice, "label": b.label, "mark": b.mark, "style": b.style}
                for b in buttons
            ],
            keymap={key: b.choice for b in buttons for key in b.keys},
        )
        self._choices = frozenset(b.choice for b in buttons)
        self._on_press = on_press
        self.on_msg(self._received)

    def _received(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        choice = content.get("choice")
        if choice is None and isinstance(content.get("key"), str):
            choice = self.keymap.get(content["key"])
        if choice in self._choices:
            self._on_press(choice)
