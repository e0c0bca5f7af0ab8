"""Importing jsonschema without building the RFC 3987 grammar at import.

An offer checks each tool's input schema with jsonschema (`check_schema`), so the first
start of MCP servers in a kernel imports it. The package's `__init__` imports its format
checkers, and where `rfc3987-syntax` is installed (Jupyter's own dependencies bring it)
that import builds a Lark grammar for the `iri` and `iri-reference` formats: most of the
import's cost, for two formats that no metaschema uses and that a tool's arguments are
not checked for (`checking_validator` asserts no `format`).

`import_jsonschema` imports jsonschema with a stand-in for `rfc3987_syntax` whose
`is_valid_syntax` imports the real module on its first call: jsonschema registers the
same checkers, they answer what the real ones answer, and the grammar is built by the
first check of an `iri` value, in this process or any other user of jsonschema in it.
The stand-in is in `sys.modules` only during the import.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Any

__all__ = ["import_jsonschema"]

_GRAMMAR_MODULE = "rfc3987_syntax"


def _import_lock(name: str) -> AbstractContextManager[Any]:
    """The import system's lock of module `name` (re-entrant), held by every thread that
    imports it from its entry in `sys.modules` to the end of its code: with it held,
    `sys.modules[name]` is not half made by another thread, so it can be read and
    replaced. Private to importlib (3.10 to 3.13 have it); without it, no lock."""
    manager = getattr(importlib._bootstrap, "_ModuleLockManager", None)
    return nullcontext() if manager is None else manager(name)


class _Deferred(types.ModuleType):
    """`rfc3987_syntax` until something uses it; then the real module's answers."""

    def __init__(self) -> None:
        super().__init__(_GRAMMAR_MODULE)
        self._lock = threading.Lock()
        self._real: types.ModuleType | None = None

    def _module(self) -> types.ModuleType:
        with self._lock:
            if self._real is None:
                with _import_lock(_GRAMMAR_MODULE):
                    if sys.modules.get(_GRAMMAR_MODULE) is self:
                        del sys.modules[_GRAMMAR_MODULE]
                    self._real = importlib.import_module(_GRAMMAR_MODULE)
            return self._real

    def is_valid_syntax(self, *args: Any, **kwargs: Any) -> Any:
        try:
            real = self._module()
        except ImportError:
            # Installed but not importable (its Lark missing or broken): jsonschema's
            # own import suppresses that error and registers no iri checker, so the
            # formats go unchecked; they do here too, never an ImportError per check.
            return True
        return real.is_valid_syntax(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Anything else taken from it during the import: the real thing, at once.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._module(), name)


def import_jsonschema() -> None:
    """Import jsonschema (if no one has), the grammar deferred to its first use."""
    # perf: register row "jsonschema-grammar" (docs/benchmarks.md)
    if "jsonschema" in sys.modules or _GRAMMAR_MODULE in sys.modules:
        return  # imported already: nothing left to save
    if importlib.util.find_spec(_GRAMMAR_MODULE) is None:
        return  # not installed: jsonschema's import builds no grammar
    # Under both modules' import locks, taken in the order an import of jsonschema takes
    # them: another thread's import of either is not under way while the stand-in goes
    # in and out of `sys.modules` (it would replace a real module half made, whose own
    # imports then fail, or jsonschema would find that module and register no checker).
    with ExitStack() as locks:
        locks.enter_context(_import_lock("jsonschema"))
        locks.enter_context(_import_lock(_GRAMMAR_MODULE))
        if "jsonschema" in sys.modules or _GRAMMAR_MODULE in sys.modules:
            return  # imported by another thread meanwhile
        deferred = _Deferred()
        sys.modules[_GRAMMAR_MODULE] = deferred
        try:
            import jsonschema  # type: ignore[import-untyped]  # noqa: F401, PLC0415
        finally:
            if sys.modules.get(_GRAMMAR_MODULE) is deferred:
                del sys.modules[_GRAMMAR_MODULE]
