"""What `--approve ask` shows before a tool that changes things runs.

The user approves exactly what will run: every argument in full, its control characters
made visible (`render.cell_text`), so a `\\r`, an ANSI escape, a bidi override or a
zero-width character cannot hide part of a command. Only data a tool writes (a file's new
content) may be shortened to its size, head and tail; answering `v` shows all of it.
The answers: allow this call, allow every call of this tool for the rest of this session
(in this kernel: `_cell_runs.allowing` keeps them), or deny.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Literal

from ..render import cell_text
from ..tools import change_diff
from ..words import shown_arguments

# Arguments that are data written to a file, not what runs or where: the only ones that
# may be shortened (a command, code or path is always shown whole).
WRITTEN = frozenset({"content", "old_string", "new_string"})
LONG = 3000  # characters of a written value shown without asking for `v`
HEAD_LINES, HEAD_CHARS = 15, 1500
TAIL_LINES, TAIL_CHARS = 8, 800
GUTTER = "    │ "  # marks the lines of a multi-line value, so none can pass for ours
# Characters one prompt may print. Jupyter drops a cell's output past its data rate limit
# (1 MB/s over 3 s by default) while `input()` still asks: a 4 MB command would be asked
# about with nothing of it on screen. What cannot be shown whole is not allowed.
SHOWABLE = 100_000

# An answer: this call, every call of its tool for the rest of the session, or no.
Choice = Literal["allow", "always", "deny"]


def approval_text(
    tool: str, arguments: Mapping[str, object], *, whole: bool, viewable: bool = True
) -> tuple[str, bool]:
    """The lines shown before asking, and whether a written value was shortened."""
    out = [f"{cell_text(tool)} wants to run with:"]
    shortened = False
    for key, value in shown_arguments(arguments).items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        name = cell_text(str(key))
        shown = cell_text(text, keep_lines=True)
        if "\n" not in shown and (len(text) <= LONG or key not in WRITTEN or whole):
            out.append(f"  {name}: {shown}")
            continue
        out.append(f"  {name}: ({len(text)} characters, {text.count(chr(10)) + 1} lines)")
        if len(text) > LONG and key in WRITTEN and not whole:
            # Cut the raw text, then escape each part: an escape is never cut in two.
            head = "\n".join(text.split("\n")[:HEAD_LINES])[:HEAD_CHARS]
            tail = "\n".join(text.split("\n")[-TAIL_LINES:])[-TAIL_CHARS:]
            hidden = len(text) - len(head) - len(tail)
            if hidden > 0:
                shown = (
                    f"{cell_text(head, keep_lines=True)}\n"
                    f"… {hidden} characters not shown "
                    + ("(answer v to see all)" if viewable else "(too many to show here)")
                    + " …\n"
                    f"{cell_text(tail, keep_lines=True)}"
                )
                shortened = True
        out.extend(GUTTER + line for line in shown.split("\n"))
    return "\n".join(out), shortened


def change_text(tool: str, arguments: Mapping[str, object]) -> str | None:
    """A cell change's diff as asked about, made printable; None for any other call."""
    diff = change_diff(tool, dict(arguments))
    return None if diff is None else cell_text(diff, keep_lines=True)


def deny_unshowable(tool: str, length: int) -> Choice:
    print(
        f"{cell_text(tool)} was not allowed: its arguments are {length} characters long, too "
        "long to show here in full, and only what is shown can be approved.",
        flush=True,
    )
    return "deny"


def ask_approval(tool: str, arguments: Mapping[str, object], read: Callable[[str], str]) -> Choice:
    """Show the call, then ask `read` (the kernel's `input`): `y`/`yes` allows it, `a`/`all`
    allows every call of `tool` for the rest of the session, anything else denies it.
    A cell change is shown as its diff, and only `y` accepts it."""
    change = change_text(tool, arguments)
    if change is not None:
        text = f"{cell_text(tool)} wants to change the notebook:\n{change}"
        if len(text) > SHOWABLE:
            return deny_unshowable(tool, len(text))
        print(text, flush=True)
        answer = read("Accept this change? [y/N] ").strip().lower()
        return "allow" if answer in ("y", "yes") else "deny"
    viewable = len(approval_text(tool, arguments, whole=True)[0]) <= SHOWABLE
    whole = False
    name = cell_text(tool)
    while True:
        text, shortened = approval_text(tool, arguments, whole=whole, viewable=viewable)
        if len(text) > SHOWABLE:
            return deny_unshowable(tool, len(text))
        print(text, flush=True)
        shortened = shortened and viewable
        choices = "y/N/v/a" if shortened else "y/N/a"
        answer = read(
            f"Allow {name}? [{choices}] (a: every {name} call for the rest of this session) "
        )
        answer = answer.strip().lower()
        if shortened and answer in ("v", "view"):
            whole = True
            continue
        if answer in ("a", "all"):
            print(f"(every {name} call is allowed for the rest of this session)", flush=True)
            return "always"
        return "allow" if answer in ("y", "yes") else "deny"
