"""The benchmark scripts, run whole (`run_bench`: the integration tier, tests/helpers/tiers.py)
or as modules, for tests that measure what they build.

bench/ is not a package (its scripts are run as files), so a test imports a script by
its path: the same session a benchmark weighs is the one a memory test bounds.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_startup() -> ModuleType:
    """bench/bench_startup.py (`build(directory, facts)` writes its sessions)."""
    spec = importlib.util.spec_from_file_location("bench_startup", BENCH / "bench_startup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_bench(
    script: str, *args: str, timeout: float = 300, **options: Any
) -> subprocess.CompletedProcess[str]:
    """`python bench/<script> --quick *args`, its output captured; `options` to Popen."""
    argv = [sys.executable, str(BENCH / script), "--quick", *args]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, **options
    )
