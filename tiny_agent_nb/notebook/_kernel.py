"""This kernel, as it records itself in the sessions it opens for writing (docs/spec.md
§9): its process (pid, host, when it started) and, where known, the Jupyter kernel id
and the notebook's file name.

The process's start is read once per process and kept: two records by the same process
must say the same, since that is how a later run tells "the same kernel reopened the
session" (its variables are all there) from "another kernel" (they are gone).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys
import time
from functools import cache
from pathlib import Path

from ..agent import AgentError
from ..render import cell_text
from ..session import NewFact, SessionError, SessionStore
from ..session import facts as f

# What a kernel id may look like in the file: Jupyter's are UUIDs, VS Code's similar.
_KERNEL_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_IMPORTED_AT = time.time_ns() // 1_000_000


def record_kernel(store: SessionStore, notebook: Path | None) -> None:
    """This kernel opened `store`'s session for writing; first, for what recovery settles
    next is this kernel's doing. A refused write is an AgentError that says what to do."""
    try:
        store.commit([kernel_record(notebook)])
    except SessionError as exc:
        name = cell_text(store.path.name)
        raise AgentError(
            f"opening {name} could not be recorded in it ({type(exc).__name__}: "
            f"{cell_text(str(exc))}). Nothing was changed: if the disk is full, free space "
            f"first, then `%agent session {cell_text(shlex.quote(str(store.path)))}` "
            "opens it again."
        ) from exc


def kernel_record(notebook: Path | None) -> NewFact:
    pid, host, started_at = process_identity()
    return f.NewFact(
        f.KernelOpened(
            pid=pid,
            host=host,
            startedAt=started_at,
            kernelId=jupyter_kernel_id(),
            notebook=notebook.name if notebook is not None else None,
        )
    )


@cache
def process_identity() -> tuple[int, str, int]:
    """(pid, host, epoch ms the process started)."""
    return os.getpid(), socket.gethostname(), _process_start() or _IMPORTED_AT


def _process_start() -> int | None:
    """When this process started, from Linux's /proc (boot time + the process's start
    in clock ticks); None elsewhere, where the time this module was imported stands in."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="ascii")
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text(encoding="ascii").splitlines()
            if line.startswith("btime ")
        )
        hertz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot * 1000 + ticks * 1000 // hertz


def jupyter_kernel_id() -> str | None:
    """The kernel id in the name of this kernel's connection file (`kernel-<id>.json`),
    as Jupyter servers and VS Code name it; None outside a kernel."""
    if "ipykernel" not in sys.modules:  # a terminal IPython: importing it would cost ~0.3 s
        return None
    try:
        from ipykernel.connect import get_connection_file  # noqa: PLC0415

        name = Path(get_connection_file()).name
    except Exception:  # not running in a kernel
        return None
    if not (name.startswith("kernel-") and name.endswith(".json")):
        return None
    stem = name.removeprefix("kernel-").removesuffix(".json")
    return stem if _KERNEL_ID.fullmatch(stem) else None
