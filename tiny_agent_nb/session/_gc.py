"""The cyclic GC paused around work that makes many objects and frees none of them."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off while a file is reduced, or its snapshot encoded.

    Each line becomes a dozen pydantic objects that die young, plus about one kept record
    per fact; the young collections they trigger are wasted work. Nothing made here forms
    a cycle worth collecting mid-load. Load and salvage share it (one reader loop); a
    snapshot's writer too, whose columns would otherwise set off full collections over
    the very tables it encodes.
    """
    # perf: register row "gc-load" (docs/benchmarks.md)
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def empty_free_lists() -> None:
    """A full collection empties the interpreter's free lists. Over frozen objects it
    examines none, so it costs the same in a kernel of millions of objects as in a fresh
    one; where the application froze objects itself, unfreezing would undo that, and a
    plain collection runs instead (register row "first-open-reload")."""
    if gc.get_freeze_count():
        gc.collect()
        return
    gc.freeze()
    try:
        gc.collect()
    finally:
        gc.unfreeze()
