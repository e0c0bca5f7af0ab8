"""The cyclic GC paused around work that makes many objects and frees none of them."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off while a file is reduced.

    Each line becomes a dozen pydantic objects that die young, plus about one kept record
    per fact; the young collections they trigger are wasted work. Nothing made here forms
    a cycle worth collecting mid-load. Load and salvage share it (one reader loop).
    """
    # perf: register row "gc-load" (docs/benchmarks.md)
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
