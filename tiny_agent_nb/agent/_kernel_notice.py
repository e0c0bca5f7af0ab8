"""The kernel notice (docs/spec.md §9): tells the model, once, that the conversation goes
on in another kernel, where what its `python` calls defined and the user's variables are
gone. It is a `kernelNotice` entry committed with the first run (or resume) after the
change, so the file holds what the model was told. It is due when the latest
`kernelOpened` has none yet, a conversation came before it, and another process wrote
the entries just before it. Two restarts with no run between make one notice.

The names come from the code of earlier `python` calls as their intents recorded it,
parsed with `ast`, never run: what binds a name at module level, minus what `del` removed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from itertools import islice

from ..provider import messages as m
from ..render import when
from ..session import Kernel, NewFact, SessionState, SessionStore, ToolIntent
from ..session import facts as f

NAMES_SHOWN = 40  # names listed in a notice; the rest are counted
CODE_CHARS = 200_000  # of the newest python calls' code parsed for one notice
PYTHON_TOOL = "python"


def due_kernel_notice(store: SessionStore) -> NewFact | None:
    """The notice the next run must start with, or None (the session is read only then)."""
    if _told_about(store.kernels()) is None:
        return None
    return kernel_notice(store.load())


def kernel_notice(state: SessionState) -> NewFact | None:
    kernels = list(state.kernels.values())
    current = _told_about(kernels)
    if current is None:
        return None
    told = next((k for k in reversed(kernels[:-1]) if k.notice_id is not None), None)
    names = defined_names(_python_codes(state, told.intents_before if told else 0, current))
    restored = defined_names(_replayed_codes(state, current))
    return f.kernel_notice(current.id, notice_text(current, names, restored))


def _told_about(kernels: list[Kernel]) -> Kernel | None:
    """The kernel a notice is due about, if any (the module says when)."""
    if not kernels:
        return None  # a writer that records no kernel: nothing to compare
    current = kernels[-1]
    if current.notice_id is not None or current.entries_before == 0:
        return None
    writer = next(
        (k for k in reversed(kernels[:-1]) if k.entries_before < current.entries_before), None
    )
    if writer is not None and writer.same_process(current):
        return None  # the same process reopened the session: its variables are all there
    return current


def notice_text(kernel: Kernel, names: list[str], restored: Sequence[str] = ()) -> str:
    """The notice; `restored`: names replayed runs defined again (docs/spec.md §12)."""
    text = (
        f"{m.KERNEL_NOTICE_START} The notebook's kernel restarted: this conversation goes on in "
        f"a new Python process, started {when(kernel.started_at)}. Gone with the old one: "
    )
    gone = [name for name in names if name not in set(restored)]
    if gone:
        text += f"the names earlier `python` calls defined ({_listed(gone)}), and "
    text += "the user's variables, until the user runs their cells again. "
    if restored:
        text += (
            "Defined again since, by earlier cells replayed from the session (their "
            f"`python` calls ran again in the new process): {_listed(restored)}. "
        )
    return text + "Files on disk are unchanged."


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    more = len(names) - NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _replayed_codes(state: SessionState, current: Kernel) -> list[str]:
    """The code replayed runs ran again, and completed, in the current kernel."""
    intents = islice(state.tool_intents.values(), current.intents_before, None)
    return _newest(
        i
        for i in intents
        if i.status == "completed" and state.operations[i.operation_id].kind == "replay"
    )


def _python_codes(state: SessionState, start: int, current: Kernel) -> list[str]:
    """The code of the `python` calls from the `start`-th intent up to the current kernel
    (a denied call never ran)."""
    intents = islice(state.tool_intents.values(), start, current.intents_before)
    return _newest(
        i
        for i in intents
        if i.tool.name == PYTHON_TOOL and i.tool.source == "builtin" and i.status != "denied"
    )


def _newest(intents: Iterable[ToolIntent]) -> list[str]:
    """The code of the calls, the newest that fit in CODE_CHARS together, oldest first."""
    codes = [code for i in intents if isinstance(code := i.arguments.get("code"), str)]
    kept: list[str] = []
    budget = CODE_CHARS
    for code in reversed(codes):
        if len(code) > budget:
            break
        budget -= len(code)
        kept.append(code)
    return kept[::-1]


def defined_names(codes: Iterable[str]) -> list[str]:
    """The names the code, run in order at a module's top level, leaves defined: first
    definition order, each once."""
    names: dict[str, None] = {}
    for code in codes:
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # code that never compiled defined nothing
        _bind(tree, names)
    return list(names)


def _bind(node: ast.AST, names: dict[str, None]) -> None:
    """Add the names `node` binds in the module's scope to `names`, in order."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names[node.name] = None
        return  # what its body binds is its own
    if isinstance(node, ast.Lambda):
        return
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            if alias.name != "*":  # what * brings is not in the code
                names[alias.asname or alias.name.split(".")[0]] = None
        return
    if isinstance(node, ast.AnnAssign) and node.value is None:
        return  # `x: int` alone binds nothing
    if isinstance(node, ast.comprehension):
        children: list[ast.AST] = [node.iter, *node.ifs]  # its target is the comprehension's
    else:
        children = list(ast.iter_child_nodes(node))
    # A value is evaluated before its targets are bound, an iterable before the loop's.
    ahead: ast.AST | None = None
    if isinstance(node, (ast.For, ast.AsyncFor)):
        ahead = node.iter
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
        ahead = node.value
    children.sort(key=lambda child: child is not ahead)
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        names[node.id] = None
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Del):
        names.pop(node.id, None)
    elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        names[node.name] = None
    elif isinstance(node, ast.MatchMapping) and node.rest:
        names[node.rest] = None
    for child in children:
        _bind(child, names)
