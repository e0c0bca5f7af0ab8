"""list_variables: the notebook's variables, listed and described without running code:
no method of the user's own classes is called, whatever they define, and every answer
is bounded."""

from __future__ import annotations

import datetime
import sys
import types
import uuid
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.tools import ToolContext
from tiny_agent_nb.tools._values import dtype_name
from tiny_agent_nb.tools._variables import ListVariables

np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")
# As the installed pandas names them: pandas 3 (Python 3.11+) says `pandas.DataFrame` and
# a string column's dtype `str`; pandas 2 (the newest on Python 3.10) says
# `pandas.core.frame.DataFrame` and `object`.
FRAME = f"{pd.DataFrame.__module__}.DataFrame"
SERIES = f"{pd.Series.__module__}.Series"
TEXT = str(pd.Series(["a"]).dtype)


class Ran(BaseException):
    """Raised by every method of `Hostile`: a BaseException, so no `except Exception`
    in the tool can hide that it was called."""


class Hostile:
    """Each way of looking at it runs its code."""

    def __init__(self) -> None:
        self.note = "kept"

    def __repr__(self) -> str:
        raise Ran("__repr__")

    def __str__(self) -> str:
        raise Ran("__str__")

    def __len__(self) -> int:
        raise Ran("__len__")

    def __index__(self) -> int:
        raise Ran("__index__")

    def __iter__(self) -> Any:
        raise Ran("__iter__")

    def __getattr__(self, name: str) -> Any:
        raise Ran(f"__getattr__ {name}")

    def __eq__(self, other: object) -> bool:
        raise Ran("__eq__")

    def __hash__(self) -> int:
        raise Ran("__hash__")

    @property
    def shape(self) -> Any:
        raise Ran("shape")

    @property
    def columns(self) -> Any:
        raise Ran("columns")

    @property  # type: ignore[override]
    def __class__(self) -> Any:  # what isinstance() falls back on
        raise Ran("__class__")


class HostileKey(Hostile):
    """A Hostile a dict can hold as a key (hashed when the test builds the dict)."""

    __hash__ = object.__hash__


class HostileList(list[int]):
    def __len__(self) -> int:
        raise Ran("__len__")

    def __iter__(self) -> Any:
        raise Ran("__iter__")

    def __repr__(self) -> str:
        raise Ran("__repr__")


def hostile_class() -> type:
    """A class whose metaclass runs code on every attribute read, hash and comparison
    (made in a function: pytest would read attributes of a module-level one)."""

    class HostileMeta(type):
        def __getattribute__(cls, name: str) -> Any:
            raise Ran(f"metaclass __getattribute__ {name}")

        def __hash__(cls) -> int:
            raise Ran("metaclass __hash__")

        def __eq__(cls, other: object) -> bool:
            raise Ran("metaclass __eq__")

    class Shadowy(metaclass=HostileMeta):
        pass

    return Shadowy


SHADOWY = "test_tools_variables.hostile_class.<locals>.Shadowy"


class HiddenDict:
    @property  # type: ignore[misc]
    def __dict__(self) -> Any:  # type: ignore[override]
        raise Ran("__dict__")


class Sample:
    def __init__(self) -> None:
        self.rate = 0.5
        self.name = "x" * 500
        self.inner = Hostile()


# In a tuple: pytest looks at every module-level name, and a Hostile's attributes run.
DEFAULTS = (Hostile(),)


def helper(
    frame: Any, column: str = "total", *extra: Any, scale: Any = DEFAULTS[0], **kw: Any
) -> Any:
    """Sum a column.

    More text."""


def namespace() -> dict[str, Any]:
    objects = np.empty(3, dtype=object)
    objects[0] = Hostile()
    return {
        "df": pd.DataFrame({"region": ["north", "south"] * 4, "total": [1.5, 2.0] * 4}),
        "wide": pd.DataFrame({f"c{i}": [i] for i in range(300)}),
        "series": pd.Series([3, 4, 5], name="n"),
        "matrix": np.arange(12.0).reshape(3, 4),
        "objects": objects,
        "hostile": Hostile(),
        "hostile_list": HostileList([1, 2, 3]),
        "shadowy": hostile_class()(),
        "hidden_dict": HiddenDict(),
        "sample": Sample(),
        "nested": {"a": [1, 2, {"deep": Hostile()}], HostileKey(): "key"},
        "huge_int": 10**5000,
        "text": "hello",
        "long_text": "y" * 100_000,
        "when": datetime.date(2024, 1, 2),
        "helper": helper,
        "np": np,
        "Sample": Sample,
        "Shadowy": hostile_class(),
        "_private": 1,
        "In": [],
    }


def run(ns: dict[str, Any], name: str | None = None, **context: Any) -> tuple[str, bool]:
    context.setdefault("hidden_variables", {"In": ns.get("In")})
    ctx = ToolContext(workspace=Path("/"), namespace=ns, **context)
    output = ListVariables().run({} if name is None else {"name": name}, ctx)
    return output.content, output.is_error


def test_the_listing_names_types_sizes_shapes_dtypes_and_columns() -> None:
    text, error = run(namespace())
    assert not error
    lines = text.splitlines()
    assert lines[0] == "15 variable(s):"
    assert f"- df: {FRAME}, 8 rows, 2 columns: 'region' {TEXT}, 'total' float64" in lines
    assert "- matrix: numpy.ndarray, shape (3, 4), dtype float64" in lines
    assert f"- series: {SERIES}, length 3, dtype int64, name 'n'" in lines
    assert "- text: str, 'hello'" in lines
    assert f"- long_text: str, {'y' * 80!r}… (100000 characters)" in lines
    assert "- when: datetime.date, datetime.date(2024, 1, 2)" in lines
    assert "- huge_int: int, <int of 16610 bits>" in lines
    assert "- hostile: test_tools_variables.Hostile" in lines
    assert "- hostile_list: test_tools_variables.HostileList, len 3" in lines
    wide = next(line for line in lines if line.startswith("- wide:"))
    assert wide.endswith("… (300 columns)"), wide
    assert "modules: np" in lines
    assert "functions: helper" in lines
    assert "classes: Sample, Shadowy" in lines
    # IPython's own names and private ones are not the user's variables
    assert "_private" not in text and "- In:" not in text


def test_a_name_ipython_hid_is_listed_once_the_user_rebinds_it() -> None:
    ns = namespace()
    ns["In"] = "rebound"
    text, _ = run({**ns}, None, hidden_variables={"In": []})
    assert "- In: str, 'rebound'" in text.splitlines()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "df",
            [
                f"df: {FRAME}",
                "8 rows, 2 columns",
                "columns (dtype):",
                f"  'region'  {TEXT}",
                "  'total'  float64",
                "first 5 rows:",
                "  'region'='north', 'total'=1.5",
            ],
        ),
        (
            "series",
            [f"series: {SERIES}", "length 3, dtype int64, name 'n'", "first values: 3, 4, 5"],
        ),
        (
            "objects",
            [
                "objects: numpy.ndarray",
                "shape (3,), dtype object",
                "first elements (flat): <test_tools_variables.Hostile>, None, None",
            ],
        ),
        (
            "hostile",
            [
                "hostile: test_tools_variables.Hostile",
                "instance attributes (1):",
                "  note = 'kept'",
            ],
        ),
        ("hostile_list", ["hostile_list: test_tools_variables.HostileList", "len 3", "[1, 2, 3]"]),
        (
            "hidden_dict",
            [
                "hidden_dict: test_tools_variables.HiddenDict",
                "(its attributes are not read: that would run its class's code)",
            ],
        ),
        (
            "nested",
            [
                "nested: dict",
                "len 2",
                "{'a': [1, 2, <dict of 1>], <test_tools_variables.HostileKey>: 'key'}",
            ],
        ),
        (
            "helper",
            [
                "helper: function",
                "helper(frame, column='total', *extra, scale=<test_tools_variables.Hostile>, **kw)",
                "Sum a column.",
            ],
        ),
        ("Sample", ["Sample: type", "class, bases: object", "members: none"]),
    ],
)
def test_describing_one_variable_runs_none_of_its_code(name: str, expected: list[str]) -> None:
    text, error = run(namespace(), name)
    assert not error, text
    assert text.splitlines()[: len(expected)] == expected


def test_an_object_of_a_hostile_metaclass_is_named_without_its_code() -> None:
    text, error = run(namespace(), "shadowy")
    assert not error
    assert text.splitlines()[0] == f"shadowy: {SHADOWY}"
    listing, _ = run({"shadowy": hostile_class()()})
    assert listing.splitlines()[1] == f"- shadowy: {SHADOWY}"


def test_every_answer_is_bounded() -> None:
    ns = namespace()
    ns.update({f"v{i}": i for i in range(1000)})
    listing, _ = run(ns)
    assert "… 815 more, not listed" in listing
    described, _ = run(ns, "long_text")
    assert len(described) < 2200
    assert described.endswith("… (100000 characters)")
    wide, _ = run(ns, "wide")
    assert "  … 250 more" in wide
    assert len(run(ns, None, output_limit=500)[0]) < 600


def test_an_unknown_name_is_an_error_that_suggests_the_close_one() -> None:
    text, error = run(namespace(), "DF")
    assert error
    assert text == (
        "no variable named 'DF' in the notebook. Did you mean df? "
        "Call list_variables without a name to see them all."
    )


def test_outside_a_notebook_it_says_there_is_no_namespace() -> None:
    output = ListVariables().run({}, ToolContext(workspace=Path("/")))
    assert output.is_error
    assert "no notebook namespace" in output.content


def test_a_module_and_a_plain_value_are_described() -> None:
    ns = {"np": np, "mod": types.ModuleType("scratch"), "when": datetime.date(2024, 1, 2)}
    text, _ = run(ns, "np")
    assert text.splitlines()[:2] == ["np: module", "module 'numpy'"]
    assert f"version {np.__version__!r}" in text
    assert run(ns, "mod")[0] == "mod: module\nmodule 'scratch'"


class HostileArray(np.ndarray):  # type: ignore[misc]
    """An ndarray subclass (numpy.matrix and MaskedArray are others) whose own attributes
    are its class's code."""

    @property
    def shape(self) -> Any:
        raise Ran("shape")

    @property
    def dtype(self) -> Any:
        raise Ran("dtype")

    @property
    def size(self) -> Any:
        raise Ran("size")

    @property
    def flat(self) -> Any:
        raise Ran("flat")


class HostileScalar(np.int32):  # type: ignore[misc]
    def item(self, *args: Any) -> Any:
        raise Ran("item")


class HostileZone(datetime.tzinfo):
    def utcoffset(self, dt: Any) -> Any:
        raise Ran("utcoffset")

    def __repr__(self) -> str:
        raise Ran("tzinfo __repr__")


class HostileName(str):
    def __repr__(self) -> str:
        raise Ran("name __repr__")


def test_subclasses_and_parts_of_the_known_types_run_none_of_their_code() -> None:
    """numpy's arrays and scalars are read through numpy's own code even when a subclass
    redefines it, a datetime's repr is only taken when it calls no tzinfo's code, and a
    UUID's when its number is an int (its repr formats it with `%x`: `__index__`)."""
    named = datetime.timezone(datetime.timedelta(hours=1), HostileName("CET"))
    forged = uuid.UUID(int=5)
    object.__setattr__(forged, "int", Hostile())  # its slot, past UUID's __setattr__
    ns = {
        "array": np.arange(3).view(HostileArray),
        "scalar": HostileScalar(7),
        "aware": datetime.datetime(2024, 1, 2, 3, 4, tzinfo=HostileZone()),
        "at": datetime.time(3, 4, tzinfo=HostileZone()),
        "named_zone": named,
        "in_named_zone": datetime.datetime(2024, 1, 2, tzinfo=named),
        "utc": datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc),
        "masked": np.ma.masked_array([1, 2], mask=[0, 1]),
        "in_a_list": [HostileScalar(8), datetime.time(5, tzinfo=HostileZone())],
        "forged_uuid": forged,
    }
    listing, error = run(ns)
    assert not error, listing
    assert listing.splitlines()[1:] == [
        "- array: test_tools_variables.HostileArray, shape (3,), dtype int64",
        "- at: datetime.time, datetime.time(3, 4, tzinfo=<test_tools_variables.HostileZone>)",
        "- aware: datetime.datetime, datetime.datetime(2024, 1, 2, 3, 4, "
        "tzinfo=<test_tools_variables.HostileZone>)",
        "- forged_uuid: uuid.UUID",
        "- in_a_list: list, len 2",
        "- in_named_zone: datetime.datetime, datetime.datetime(2024, 1, 2, 0, 0, "
        "tzinfo=<datetime.timezone>)",
        "- masked: numpy.ma.MaskedArray, shape (2,), dtype int64",
        "- named_zone: datetime.timezone",
        "- scalar: test_tools_variables.HostileScalar, 7",
        "- utc: datetime.datetime, datetime.datetime(2024, 1, 2, 0, 0, "
        "tzinfo=datetime.timezone.utc)",
    ]
    described, error = run(ns, "array")
    assert not error and described.splitlines()[2] == "first elements (flat): 0, 1, 2"
    described, error = run(ns, "in_a_list")
    assert not error
    assert described.splitlines()[2] == (
        "[8, datetime.time(5, 0, tzinfo=<test_tools_variables.HostileZone>)]"
    )


def spies() -> tuple[list[str], type, type]:
    """`calls`, and two classes whose every method a looker could call records in it:
    `Cloak` claims through `__class__` to be a str (what `isinstance` falls back on),
    `Text` is a str subclass (its `==`, `str()`, formatting and methods are its code)."""
    calls: list[str] = []

    class Cloak:
        @property  # type: ignore[misc]
        def __class__(self) -> Any:  # type: ignore[override]
            calls.append("__class__")
            return str

    class Text(str):
        def __eq__(self, other: object) -> bool:
            calls.append("__eq__")
            return str.__eq__(self, other)

        __hash__ = str.__hash__

        def __format__(self, spec: str) -> str:
            calls.append("__format__")
            return str.__format__(self, spec)

        def __str__(self) -> str:
            calls.append("__str__")
            return self

        def __add__(self, other: str) -> str:
            calls.append("__add__")
            return str.__add__(self, other)

    for name in ("strip", "split", "splitlines", "replace", "startswith", "__len__"):

        def spy(self: str, *args: Any, _name: str = name) -> Any:
            calls.append(_name)
            return getattr(str, _name)(self, *args)

        setattr(Text, name, spy)
    return calls, Cloak, Text


def test_names_docstrings_files_and_defaults_are_read_without_their_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a class, module or function holds as its module name, qualified name,
    docstring, file, version or defaults may be an object of the user's class: it is read
    as the plain value it holds, or not shown, and none of its methods is called."""
    calls, cloak, text = spies()

    class Named:
        __module__ = text("lab")
        __qualname__ = text("Named")

    class Cloaked:
        __module__ = cloak()
        __doc__ = cloak()

    class Documented:
        __doc__ = text("A class.\nMore.")

    module = types.ModuleType("scratch")
    module.__file__ = cloak()
    module.__version__ = text("1.0")  # type: ignore[attr-defined]

    def function(a: Any, b: Any = 1, *, c: Any = 2) -> None: ...

    function.__doc__ = text("Does it.")
    function.__defaults__ = type("Defaults", (tuple,), {"__len__": lambda s: calls.append("len")})(
        (1,)
    )
    function.__kwdefaults__ = type("Kw", (dict,), {"__len__": lambda s: calls.append("len")})(
        {"c": 2}
    )
    path = Path("/data/x.csv")
    object.__setattr__(path, "_str", text("/data/x.csv"))  # where a path keeps its text
    ns = {
        "named": Named(),
        "Named": Named,
        "cloaked": Cloaked(),
        "Cloaked": Cloaked,
        "Documented": Documented,
        "module": module,
        "function": function,
        "path": path,
        "plain_path": Path("/data/y.csv"),
        "id": uuid.UUID(int=1),
    }
    # pandas as sys.modules holds it may be any module: its `__getattr__` is code too
    spy_module = type("Lazy", (types.ModuleType,), {"__getattr__": lambda s, n: calls.append(n)})
    monkeypatch.setitem(sys.modules, "pandas", spy_module("pandas"))
    listing, error = run(ns)
    assert not error, listing
    assert "- named: lab.Named" in listing.splitlines()
    assert f"- cloaked: {Cloaked.__qualname__}" in listing.splitlines()  # no module said
    posix = f"{type(Path()).__module__}.PosixPath"  # pathlib._local's from Python 3.13
    assert f"- path: {posix}" in listing.splitlines()  # its text not shown
    assert f"- plain_path: {posix}, PosixPath('/data/y.csv')" in listing.splitlines()
    assert f"- id: uuid.UUID, {uuid.UUID(int=1)!r}" in listing.splitlines()
    described = {name: run(ns, name) for name in ns}
    assert all(not error for _, error in described.values()), described
    assert described["Documented"][0].splitlines()[2] == "A class."
    assert described["module"][0] == "module: module\nmodule 'scratch'\nversion '1.0'"
    assert described["function"][0].splitlines()[1:] == ["function(a, b=1, *, c=2)", "Does it."]
    assert calls == []


def test_a_dtype_is_named_by_its_own_text_only_when_numpy_or_pandas_holds_its_class() -> None:
    """Any class may say `__module__ = "pandas..."`; a dtype of such a class is named by
    its type, and its `__str__` is not called."""

    class Spoof:
        __module__ = "pandas.core.dtypes.dtypes"

        def __str__(self) -> str:
            raise Ran("__str__")

    assert dtype_name(np.dtype("float64")) == "float64"
    assert dtype_name(pd.CategoricalDtype()) == "category"
    assert dtype_name(Spoof()) == f"<pandas.core.dtypes.dtypes.{Spoof.__qualname__}>"
