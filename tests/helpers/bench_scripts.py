"""The benchmark scripts as modules, for tests that measure what they build.

bench/ is not a package (its scripts are run as files), so a test imports a script by
its path: the same session a benchmark weighs is the one a memory test bounds.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_startup() -> ModuleType:
    """bench/bench_startup.py (`build(directory, facts)` writes its sessions)."""
    spec = importlib.util.spec_from_file_location("bench_startup", BENCH / "bench_startup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
