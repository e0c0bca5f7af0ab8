"""The run's bytecode directory (PYTHONPYCACHEPREFIX), filled before any process needs it.

tests/conftest.py points every process of a run at one temporary bytecode directory, so
that the package (whose sources carry no bytecode where PYTHONDONTWRITEBYTECODE is set) is
compiled once per run rather than in every kernel and subprocess. With the prefix set,
Python looks for bytecode *only* there, for every module: left empty, the first processes
of a run (four workers, which start together, then the first kernels) each compiled the
standard library, IPython, pydantic... from source again, and each worker rewrote the
asserts of every test module. `fill` does that work once, in the controller, before the
workers start:

- the bytecode already beside the installed sources is linked into the prefix (a
  symlink per file: Python replaces a stale one with a file of its own, never writing
  through it);
- the package and the tests' helpers are compiled into it;
- the test modules are rewritten by pytest's assertion rewriter into it, exactly as a
  worker's import would (pytest's private functions: if they change, `fill` leaves the
  rewriting to the workers, as before).

That is ~5 s of CPU, before any worker starts. So the directory is kept from run to run
(`kept_prefix`), one per checkout and interpreter, in the temporary directory: a later run
finds it filled, and what changed since (an edited module, a package installed) is
compiled by the first process that imports it and written there, as `__pycache__` works.
"""

from __future__ import annotations

import compileall
import contextlib
import hashlib
import os
import re
import stat
import sys
import tempfile
from pathlib import Path

import pytest

FILLED = "filled"  # written in the directory once `fill` has filled it


def kept_prefix(checkout: Path) -> Path | None:
    """This checkout's bytecode directory for this interpreter, kept from run to run, or
    None where it cannot be trusted: the directory holding it must be this user's and
    writable by no one else, as bytecode in it is run without a question."""
    # In memory where there is a tmpfs: tens of thousands of small files are made, and a
    # disk under the fsyncs of other runs makes that a minute.
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() else Path(tempfile.gettempdir())
    mine = base / f"tiny-agent-nb-pycache-{os.getuid()}"
    try:
        mine.mkdir(mode=0o700, exist_ok=True)
        info = mine.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    key = f"{checkout}\0{sys.executable}\0{sys.version}".encode()
    prefix = mine / hashlib.sha256(key).hexdigest()[:16]
    prefix.mkdir(exist_ok=True)
    return prefix


def fill(prefix: Path, config: pytest.Config) -> None:
    """Fill `prefix` for the processes of this run (the current one included), unless an
    earlier run did."""
    sys.pycache_prefix = str(prefix)
    if (prefix / FILLED).exists():
        return
    _link_installed_bytecode(prefix, config.rootpath)
    for package in (config.rootpath / "tiny_agent_nb", config.rootpath / "tests"):
        # The test modules are rewritten below, not compiled plainly.
        compileall.compile_dir(package, quiet=2, rx=re.compile(r"[/\\]test_[^/\\]*\.py$"))
    _rewrite_test_modules(config)
    (prefix / FILLED).touch()


def _link_installed_bytecode(prefix: Path, checkout: Path) -> None:
    tag = f".{sys.implementation.cache_tag}.pyc"
    walked: list[str] = []
    entries = {p for p in sys.path if p and Path(p).is_absolute() and Path(p).is_dir()}
    for entry in sorted(entries):
        inside = (root for root in [*walked, str(checkout)] if entry.startswith(root + os.sep))
        if entry == str(checkout) or any(inside):
            continue  # the checkout has no bytecode; a nested entry was walked already
        walked.append(entry)
        for directory, subdirectories, _ in os.walk(entry):
            if "__pycache__" not in subdirectories:
                continue
            cache = Path(directory, "__pycache__")
            mirror = prefix / directory.lstrip(os.sep)
            names = [name for name in os.listdir(cache) if name.endswith(tag)]  # noqa: PTH208
            if names:
                mirror.mkdir(parents=True, exist_ok=True)
            for name in names:
                with contextlib.suppress(FileExistsError):
                    (mirror / name).symlink_to(cache / name)


def _rewrite_test_modules(config: pytest.Config) -> None:
    try:
        from _pytest.assertion.rewrite import (  # noqa: PLC0415
            PYC_TAIL,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )

        state = config.stash[assertstate_key]
    except (ImportError, KeyError):  # another pytest, or asserts not rewritten (--assert)
        return
    tests = config.rootpath / "tests"
    for module in [tests / "conftest.py", *sorted(tests.glob("test_*.py"))]:
        cache = get_cache_dir(module)
        cache.mkdir(parents=True, exist_ok=True)
        try:
            source_stat, code = _rewrite_test(module, config)
            _write_pyc(state, code, source_stat, cache / (module.name[:-3] + PYC_TAIL))
        except (TypeError, SyntaxError):  # another signature; a module its import reports
            return
