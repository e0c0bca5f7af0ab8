"""Reading the user's objects without running the user's code: what `list_variables` shows.

Looking at an object can run code of its class: `len()`, a property, `__getattr__`,
`repr()`, `isinstance` (it reads `__class__`), a str subclass's `==` or `str()`, a lazy
frame's schema. A hostile or huge object would then hang the kernel, or hand the model
what its `__repr__` chose to say. So nothing here calls code of a type it does not know:

- types are read with `type()` and `type`'s own descriptors, tested with
  `issubclass(type(x), ...)`; a name or docstring that is a str subclass is read as the
  plain str it holds (`plain_text`);
- built-in values are read through the built-in type's own slots (`list.__len__(x)`),
  which a subclass cannot override, a bounded number of items deep;
- `numpy.ndarray` (through ndarray's own descriptors) and pandas' own `DataFrame`,
  `Series` and `Index`, when already imported, through their own attributes, bounded (no
  cost in their number of rows);
- of any other object only the type is named, and a description lists the instance
  attributes its `__dict__` holds (read by the C slot, never through a property).
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import itertools
import pathlib
import sys
import types
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

MAX_ITEMS = 10  # items of a container shown
MAX_TEXT = 80  # characters of a string shown inside a value
MAX_INT_BITS = 256  # a larger int is shown by its size (its digits take quadratic time)

_qualname = type.__dict__["__qualname__"].__get__
_module = type.__dict__["__module__"].__get__
class_namespace = type.__dict__["__dict__"].__get__
_bases = type.__dict__["__bases__"].__get__
_function_code = types.FunctionType.__dict__["__code__"].__get__
_function_defaults = types.FunctionType.__dict__["__defaults__"].__get__
_function_kwdefaults = types.FunctionType.__dict__["__kwdefaults__"].__get__
function_doc = types.FunctionType.__dict__["__doc__"].__get__
_module_dict = vars(types.ModuleType)["__dict__"].__get__

# Standard library types whose repr is their own code, and short (exactly these: a
# subclass may override `__repr__`).
_PLAIN_REPR = (
    datetime.datetime,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    datetime.timezone,
    decimal.Decimal,
    fractions.Fraction,
    uuid.UUID,
    pathlib.PurePosixPath,
    pathlib.PureWindowsPath,
    type(pathlib.Path()),
)


def type_name(cls: type) -> str:
    """`module.Qualname`, or just `Qualname` for a built-in type."""
    try:
        module, name = plain_text(_module(cls)), plain_text(_qualname(cls))
    except Exception:  # a type that is not a class of this Python: nothing to call
        return "?"
    if name is None:
        return "?"
    if module is None or module == "builtins":
        return name
    return f"{module}.{name}"


def plain_text(obj: object) -> str | None:
    """`obj` as the plain str it holds where it is a str (of a subclass too, whose own
    `__eq__`, `__format__` or `strip` are then never called), else None."""
    return str.__str__(obj) if issubclass(type(obj), str) else None


def loaded(module: str, attribute: str) -> type | None:
    """A class of a module the user has imported (never imported here), read from the
    module's namespace (a module's `__getattr__` is code too)."""
    found = module_namespace(sys.modules.get(module)).get(attribute)
    return found if issubclass(type(found), type) else None


def is_exactly(value: object, module: str, attribute: str) -> bool:
    cls = loaded(module, attribute)
    return cls is not None and type(value) is cls


def is_array(value: object) -> bool:
    ndarray = loaded("numpy", "ndarray")
    return ndarray is not None and issubclass(type(value), ndarray)


def array_attribute(array: object, name: str) -> Any:
    """`shape`, `dtype`, `size` or `flat` of an ndarray (`is_array`) through ndarray's own
    descriptor: a subclass's property of that name is its class's code."""
    return vars(loaded("numpy", "ndarray"))[name].__get__(array)


def text(value: str, limit: int = MAX_TEXT) -> str:
    """A string as a bounded literal: the first `limit` characters, and its length."""
    size = str.__len__(value)
    shown = repr(str.__getitem__(value, slice(0, limit)))
    return shown if size <= limit else f"{shown}… ({size} characters)"


def value(obj: object, depth: int = 1) -> str:
    """`obj` as a short literal where it is a value of a known type, else `<its type>`."""
    try:
        return _value(obj, depth)
    except Exception:
        return f"<{type_name(type(obj))}>"


def _value(obj: Any, depth: int) -> str:
    cls = type(obj)
    if obj is None or cls is bool:  # bool cannot be subclassed
        return repr(obj)
    if issubclass(cls, int):
        bits = int.bit_length(obj)
        return int.__repr__(obj) if bits <= MAX_INT_BITS else f"<int of {bits} bits>"
    if issubclass(cls, float):
        return float.__repr__(obj)
    if issubclass(cls, complex):
        return complex.__repr__(obj)
    if issubclass(cls, str):
        return text(obj)
    for raw in (bytes, bytearray):
        if issubclass(cls, raw):
            size = raw.__len__(obj)
            head = bytes(raw.__getitem__(obj, slice(0, MAX_TEXT)))
            return repr(head) if size <= MAX_TEXT else f"{head!r}… ({size} bytes)"
    if cls is range:
        return range.__repr__(obj)
    for base in _BRACKETS:
        if issubclass(cls, base):
            return _container(obj, cls, base, depth)
    if any(cls is plain for plain in _PLAIN_REPR):  # `in` would hash a hostile metaclass
        return _plain_repr(obj, cls)
    numpy_scalar: Any = loaded("numpy", "generic")
    if numpy_scalar is not None and issubclass(cls, numpy_scalar):
        # numpy's own scalars: `item()` is the Python value (an object array's element
        # is never one: it is the object itself); numpy's own `item`, not a subclass's.
        return _value(numpy_scalar.item(obj), depth)
    return f"<{type_name(cls)}>"


def _plain_repr(obj: Any, cls: type) -> str:
    """The repr of a `_PLAIN_REPR` value, where it is made of plain parts only: an aware
    datetime's repr is its tzinfo's `__repr__` too, a timezone's its name's, a
    Fraction's its numerator's `__str__`, a path's its parts' methods, a UUID's its
    number's `__index__` (any class may be a tzinfo, a str subclass a timezone's name or
    a path's part, an int subclass's `numerator` anything, and `object.__setattr__` puts
    anything in a UUID's slot)."""
    if cls is datetime.datetime or cls is datetime.time:
        tz = obj.tzinfo
        if tz is not None and not _plain_timezone(tz):
            naive = repr(obj.replace(tzinfo=None))[:MAX_TEXT]
            return f"{naive[:-1]}, tzinfo=<{type_name(type(tz))}>)"
    elif cls is datetime.timezone and not _plain_timezone(obj):
        return f"<{type_name(cls)}>"
    elif cls is fractions.Fraction:
        parts = (obj._numerator, obj._denominator)
        if not all(type(n) is int and int.bit_length(n) <= MAX_INT_BITS for n in parts):
            return f"<{type_name(cls)}>"
    elif (issubclass(cls, pathlib.PurePath) and not _plain_slots(obj)) or (
        cls is uuid.UUID and type(obj.int) is not int  # its repr formats it: `__index__`
    ):
        return f"<{type_name(cls)}>"
    return repr(obj)[:MAX_TEXT]


def _plain_slots(obj: object) -> bool:
    """Each slot of `obj` holds a plain str, int, bool or None, or a list or tuple of them."""
    for cls in type.__dict__["__mro__"].__get__(type(obj)):
        for slot in class_namespace(cls).values():
            if type(slot) is not types.MemberDescriptorType:
                continue
            try:
                held = slot.__get__(obj, cls)
            except AttributeError:  # not set yet (a path computes some on demand)
                continue
            parts = held if type(held) is list or type(held) is tuple else (held,)
            if not all(_is_plain_part(p) for p in parts):
                return False
    return True


def _is_plain_part(part: object) -> bool:
    cls = type(part)  # by `is`: `in` would call a metaclass's `__eq__`
    return part is None or cls is str or cls is int or cls is bool


def _plain_timezone(tz: object) -> bool:
    """A `datetime.timezone` whose name is a plain str (its repr calls nothing else)."""
    return type(tz) is datetime.timezone and type(datetime.timezone.tzname(tz, None)) is str


_BRACKETS: dict[type, tuple[str, str]] = {
    list: ("[", "]"),
    tuple: ("(", ")"),
    dict: ("{", "}"),
    set: ("{", "}"),
    frozenset: ("frozenset({", "})"),
}


def _container(obj: Any, cls: type, base: Any, depth: int) -> str:
    opening, closing = _BRACKETS[base]
    size = base.__len__(obj)
    if depth <= 0:
        return f"<{type_name(cls)} of {size}>"
    if base is dict:
        items: Iterable[str] = (
            f"{value(k, depth - 1)}: {value(v, depth - 1)}"
            for k, v in itertools.islice(dict.items(obj), MAX_ITEMS)
        )
    else:
        items = (value(v, depth - 1) for v in itertools.islice(base.__iter__(obj), MAX_ITEMS))
    shown = ", ".join(items)
    more = f", … ({size} items)" if size > MAX_ITEMS else ""
    return f"{opening}{shown}{more}{closing}"


def size(obj: object) -> str | None:
    """What the listing says of a value's size: length, shape, dtypes and columns (a
    string says its first characters and its length instead, as `value` does)."""
    cls = type(obj)
    try:
        for base in (bytes, bytearray, list, tuple, set, frozenset, dict):
            if issubclass(cls, base):
                return f"len {base.__len__(obj)}"  # type: ignore[arg-type]
        if is_array(obj):
            shape, dtype = array_attribute(obj, "shape"), array_attribute(obj, "dtype")
            return f"shape {tuple(shape)}, dtype {dtype}"
        if is_exactly(obj, "pandas", "DataFrame"):
            rows, columns = obj.shape  # type: ignore[attr-defined]
            shown = ", ".join(f"{label} {dtype}" for label, dtype in frame_columns(obj, 8))
            more = f", … ({columns} columns)" if columns > 8 else ""
            return f"{rows} rows, {columns} columns: {shown}{more}"
        if is_exactly(obj, "pandas", "Series"):
            name = obj.name  # type: ignore[attr-defined]
            named = "" if name is None else f", name {value(name, 0)}"
            return f"length {len(obj.index)}, dtype {dtype_name(obj.dtype)}{named}"  # type: ignore[attr-defined]
        if is_exactly(obj, "pandas", "Index") or is_exactly(obj, "pandas", "RangeIndex"):
            return f"length {len(obj)}, dtype {dtype_name(obj.dtype)}"  # type: ignore[arg-type, attr-defined]
    except Exception:
        return None
    return None


def frame_columns(frame: Any, limit: int) -> Iterator[tuple[str, str]]:
    """(label, dtype) of a DataFrame's first `limit` columns."""
    columns = frame.columns[:limit]
    dtypes = frame.dtypes.iloc[:limit]
    for label, dtype in zip(columns, dtypes, strict=False):
        yield value(label, 0), dtype_name(dtype)


def dtype_name(dtype: object) -> str:
    """numpy's and pandas' dtypes by their names; another library's by its type."""
    cls = type(dtype)
    module, name = plain_text(_module(cls)), str.__str__(_qualname(cls))  # a str, or a subclass
    # Theirs when the module it names holds it: any class may say `__module__ = "pandas"`.
    if (
        module is not None
        and module.split(".")[0] in ("numpy", "pandas")
        and module_namespace(sys.modules.get(module)).get(name) is cls
    ):
        return str(dtype)
    return f"<{type_name(cls)}>"


def instance_attributes(obj: object) -> dict[str, Any] | None:
    """The object's `__dict__`, reached through the getter the interpreter made for its
    class (a C slot), never through a `__dict__` property or `__getattribute__`."""
    for cls in type.__dict__["__mro__"].__get__(type(obj)):
        descriptor = class_namespace(cls).get("__dict__")
        if descriptor is None:
            continue
        if type(descriptor) is not types.GetSetDescriptorType:
            return None
        found = descriptor.__get__(obj, cls)
        return found if type(found) is dict else None
    return None


def class_bases(cls: type) -> tuple[type, ...]:
    bases = _bases(cls)
    return bases if type(bases) is tuple else ()


def module_namespace(module: object) -> dict[str, Any]:
    """A module's `__dict__` through ModuleType's own descriptor ({} for a non-module)."""
    if not issubclass(type(module), types.ModuleType):
        return {}
    found = _module_dict(module)
    return found if type(found) is dict else {}


def first_line(doc: object) -> str | None:
    doc = plain_text(doc)
    if doc is None:
        return None
    lines = [line.strip() for line in str.splitlines(doc) if line.strip()]
    return text(lines[0], 200)[1:-1] if lines else None


def signature(function: types.FunctionType) -> str:
    """`name(a, b=1, *args, c, **kwargs)` from the function's code object; defaults shown
    as values (`value`), annotations left out (reading one may evaluate it)."""
    code = _function_code(function)
    positional = code.co_argcount
    keyword_only = code.co_kwonlyargcount
    names = code.co_varnames
    # Either may be set to a tuple or dict subclass: read through the base type's slots
    # (even `or` would call a subclass's `__len__`).
    given, kw_given = _function_defaults(function), _function_kwdefaults(function)
    defaults = () if given is None else tuple.__getitem__(given, slice(None))
    kwdefaults = (
        {} if kw_given is None else {k: v for k, v in dict.items(kw_given) if type(k) is str}
    )
    parts: list[str] = []
    first_default = positional - len(defaults)
    for i in range(positional):
        default = f"={value(defaults[i - first_default], 0)}" if i >= first_default else ""
        parts.append(f"{names[i]}{default}")
        if code.co_posonlyargcount and i == code.co_posonlyargcount - 1:
            parts.append("/")
    index = positional + keyword_only
    if code.co_flags & 0x04:  # CO_VARARGS
        parts.append(f"*{names[index]}")
        index += 1
    elif keyword_only:
        parts.append("*")
    for name in names[positional : positional + keyword_only]:
        default = f"={value(kwdefaults[name], 0)}" if name in kwdefaults else ""
        parts.append(f"{name}{default}")
    if code.co_flags & 0x08:  # CO_VARKEYWORDS
        parts.append(f"**{names[index]}")
    return f"{code.co_name}({', '.join(parts)})"
