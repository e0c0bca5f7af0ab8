"""The list_variables tool: the notebook's variables, read without running code.

It runs no code the model writes, so `--approve ask` does not ask for it and `deny`
does not refuse it. Its replay policy is `never` all the same: after a crash the kernel
it read is gone, and a read of the next kernel's namespace is not the same read
(docs/spec.md §2.1). How it reads an object without running the object's code is
`_values.py`.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from . import _values as v
from ._base import BuiltinTool, ToolArguments, ToolContext, ToolError, ToolOutput
from ._limits import truncate

MAX_LISTED = 200  # data variables listed; the rest are counted
MAX_NAMED = 60  # modules, functions or classes named, per kind
MAX_COLUMNS = 50  # columns of a DataFrame described
PREVIEW_ROWS = 5
PREVIEW_ITEMS = 20  # items of a container, elements of an array, attributes of an object
_sentinel = object()


class ListVariablesArguments(ToolArguments):
    name: str | None = Field(
        None,
        description="A variable to describe (its name, not an expression); without it, "
        "every variable is listed.",
    )


class ListVariables(BuiltinTool[ListVariablesArguments]):
    name = "list_variables"
    description = (
        "List the variables of the notebook's kernel (the user's and those `python` "
        "defined): name, type, and length, shape, dtypes or columns where the value has "
        "them. With `name`, describe that one variable: its first items, rows or "
        "attributes. Runs no code and calls no method of the user's own classes."
    )
    Arguments = ListVariablesArguments

    @property
    def asks_approval(self) -> bool:
        return False  # a read: it changes nothing

    def execute(self, arguments: ListVariablesArguments, context: ToolContext) -> ToolOutput:
        if context.namespace is None:
            raise ToolError("there is no notebook namespace here (the agent runs outside IPython)")
        variables = user_variables(context.namespace, context.hidden_variables)
        if arguments.name is None:
            text = listing(variables)
        elif arguments.name in variables:
            text = describe(arguments.name, variables[arguments.name])
        else:
            close = [n for n in variables if n.lower() == arguments.name.lower()]
            hint = f" Did you mean {close[0]}?" if close else ""
            raise ToolError(
                f"no variable named {v.text(arguments.name, 100)} in the notebook.{hint} "
                "Call list_variables without a name to see them all."
            )
        return ToolOutput(truncate(text, context.output_limit))


def user_variables(namespace: Mapping[str, Any], hidden: Mapping[str, Any]) -> dict[str, Any]:
    """The user's variables, sorted by name: IPython's `%who` rule (not private, and not
    what IPython put there for itself unless the user bound the name anew)."""
    found: dict[str, Any] = {}
    for key, obj in dict.items(namespace) if isinstance(namespace, dict) else namespace.items():
        if not issubclass(type(key), str):
            continue
        name = str.__str__(key)  # a plain str: a subclass's methods are the user's code
        if not name.startswith("_") and hidden.get(name, _sentinel) is not obj:
            found[name] = obj
    return dict(sorted(found.items()))


def listing(variables: Mapping[str, Any]) -> str:
    data: list[str] = []
    kinds: dict[str, list[str]] = {"modules": [], "functions": [], "classes": []}
    for name, obj in variables.items():
        kind = _kind(obj)
        if kind is not None:
            kinds[kind].append(name)
        else:
            data.append(name)
    if not variables:
        return "The notebook has no variables yet."
    lines = [f"{len(data)} variable(s):"] if data else []
    lines += [_line(name, variables[name]) for name in data[:MAX_LISTED]]
    if len(data) > MAX_LISTED:
        lines.append(f"… {len(data) - MAX_LISTED} more, not listed")
    for kind, names in kinds.items():
        if names:
            more = f", … {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
            lines.append(f"{kind}: {', '.join(names[:MAX_NAMED])}{more}")
    return "\n".join(lines)


def _kind(obj: object) -> str | None:
    cls = type(obj)
    if cls is types.ModuleType:
        return "modules"
    if issubclass(cls, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return "functions"
    if issubclass(cls, type):
        return "classes"
    return None


def _line(name: str, obj: object) -> str:
    cls = type(obj)
    about = v.size(obj)
    if about is None:
        shown = v.value(obj, 0)
        about = None if shown == f"<{v.type_name(cls)}>" else shown  # the type says it all
    return f"- {name}: {v.type_name(cls)}" + (f", {about}" if about else "")


def describe(name: str, obj: object) -> str:
    """One variable, more than its listing line says, within a bounded size."""
    cls = type(obj)
    head = f"{name}: {v.type_name(cls)}"
    try:
        body = _details(obj)
    except Exception as exc:  # pandas' own code failed on this object: say so, no traceback
        body = [f"(could not be read further: {v.type_name(type(exc))})"]
    return "\n".join([head, *body])


def _details(obj: object) -> list[str]:
    cls = type(obj)
    if v.is_exactly(obj, "pandas", "DataFrame"):
        return _frame(obj)
    if v.is_exactly(obj, "pandas", "Series"):
        series: Any = obj
        first = [v.value(x, 1) for x in series.iloc[:PREVIEW_ITEMS]]
        return [v.size(obj) or "", "first values: " + ", ".join(first)]
    if v.is_array(obj):
        flat = v.array_attribute(obj, "flat")
        count = min(int(v.array_attribute(obj, "size")), PREVIEW_ITEMS)
        first = [v.value(flat[i], 1) for i in range(count)]
        return [v.size(obj) or "", "first elements (flat): " + ", ".join(first)]
    if issubclass(cls, str):
        return [f"len {str.__len__(obj)}: {v.text(obj, 2000)}"]  # type: ignore[arg-type]
    if issubclass(cls, (bytes, bytearray, list, tuple, set, frozenset, dict)):
        return [v.size(obj) or "", v.value(obj, 2)]
    if cls is types.ModuleType:
        namespace = v.module_namespace(obj)
        file, version = namespace.get("__file__"), namespace.get("__version__")
        return [
            f"module {v.value(namespace.get('__name__'), 0)}",
            *([f"file {v.value(file, 0)}"] if v.plain_text(file) is not None else []),
            *([f"version {v.value(version, 0)}"] if v.plain_text(version) is not None else []),
        ]
    if issubclass(cls, types.FunctionType):
        doc = v.first_line(v.function_doc(obj))
        return [v.signature(obj), *([doc] if doc else [])]  # type: ignore[arg-type]
    if issubclass(cls, type):
        namespace = v.class_namespace(obj)
        bases = ", ".join(v.type_name(b) for b in v.class_bases(obj))  # type: ignore[arg-type]
        doc = v.first_line(namespace.get("__doc__"))
        members = [k for k in namespace if type(k) is str and not k.startswith("_")]
        return [
            f"class, bases: {bases}",
            *([doc] if doc else []),
            "members: " + (", ".join(members[:PREVIEW_ITEMS]) or "none"),
        ]
    attributes = v.instance_attributes(obj)
    if attributes is None:
        return ["(its attributes are not read: that would run its class's code)"]
    shown = [
        f"  {key} = {v.value(val, 1)}"
        for key, val in list(attributes.items())[:PREVIEW_ITEMS]
        if type(key) is str
    ]
    more = (
        [f"  … {len(attributes) - PREVIEW_ITEMS} more"] if len(attributes) > PREVIEW_ITEMS else []
    )
    return [f"instance attributes ({len(attributes)}):", *shown, *more]


def _frame(frame: Any) -> list[str]:
    rows, columns = frame.shape
    lines = [f"{rows} rows, {columns} columns", "columns (dtype):"]
    lines += [f"  {label}  {dtype}" for label, dtype in v.frame_columns(frame, MAX_COLUMNS)]
    if columns > MAX_COLUMNS:
        lines.append(f"  … {columns - MAX_COLUMNS} more")
    shown = min(columns, 20)
    labels = [v.value(label, 0) for label in frame.columns[:shown]]
    lines.append(f"first {min(rows, PREVIEW_ROWS)} rows:")
    for i in range(min(rows, PREVIEW_ROWS)):
        cells = (f"{labels[j]}={v.value(frame.iat[i, j], 1)}" for j in range(shown))
        lines.append("  " + ", ".join(cells))
    return lines
