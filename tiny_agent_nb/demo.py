"""`tiny-agent-nb demo`: run the example notebook crash-and-resume.ipynb headless.

A real kernel runs it with nbclient. The cell tagged `kernel-dies` makes the agent's bash
tool kill its own kernel mid-tool (the intent is committed, the effect happened, the
result is never written); like JupyterLab, the runner starts a new kernel and goes on
with the next cell, which loads the extension, recovers and resumes. Every cell's output
is printed as it runs.

With no API key and no base URL configured, the notebook talks to the offline demo model
(scripted, and labelled so everywhere). Its agent cell says `--approve auto`, and the demo
says so: headless, nobody answers the question the default (`ask`) puts before a command.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

DIES_TAG = "kernel-dies"
KERNEL_NAME = "python3"
NOTEBOOK = "crash-and-resume.ipynb"
APPROVE = re.compile(r"--approve[ =](\S+)")


@dataclass
class NotebookRun:
    notebook: Any  # nbformat.NotebookNode, with outputs
    restarts: list[int] = field(default_factory=list)  # cells whose kernel died, as intended
    seconds: float = 0.0


def run_notebook(
    notebook: Any,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float = 300.0,
    connection_dir: Path | None = None,
    on_cell: Callable[[int, Any, bool], None] | None = None,
) -> NotebookRun:
    """Execute every code cell in order, like "Run All". A cell tagged `kernel-dies` must
    kill its kernel: the kernel is restarted (same cwd and environment) and the run goes
    on. Any other kernel death, or an error in a cell, raises."""
    # Imported here: only this command (and the tests) need a kernel client.
    from jupyter_client.manager import AsyncKernelManager  # noqa: PLC0415
    from jupyter_core.utils import run_sync  # noqa: PLC0415
    from nbclient import NotebookClient  # noqa: PLC0415
    from nbclient.exceptions import DeadKernelError  # noqa: PLC0415

    started = time.monotonic()
    connection_dir = connection_dir or cwd
    connection_dir.mkdir(parents=True, exist_ok=True)
    km = AsyncKernelManager(
        transport="ipc",  # a socket file in connection_dir, not a TCP port
        kernel_name=KERNEL_NAME,
        connection_file=str(connection_dir / f"kernel-{uuid.uuid4().hex[:12]}.json"),
    )
    client = NotebookClient(
        notebook,
        km=km,
        timeout=int(timeout),
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(cwd)}},
    )
    result = NotebookRun(notebook)
    try:
        with client.setup_kernel(env=dict(env)):
            for index, cell in enumerate(notebook.cells):
                dies = DIES_TAG in cell.get("metadata", {}).get("tags", [])
                try:
                    client.execute_cell(cell, index)
                except DeadKernelError:
                    if not dies:
                        raise
                    result.restarts.append(index)
                    if on_cell is not None:
                        on_cell(index, cell, True)
                    # What Jupyter does after "the kernel appears to have died": start it
                    # again with the same cwd and environment, and connect a new client.
                    if client.kc is not None:
                        client.kc.stop_channels()
                        client.kc = None
                    run_sync(km.restart_kernel)(now=True)
                    client.start_new_kernel_client()
                    continue
                if dies:
                    raise RuntimeError(f"cell {index} is tagged {DIES_TAG}, yet its kernel lived")
                if on_cell is not None:
                    on_cell(index, cell, False)
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    result.seconds = time.monotonic() - started
    return result


def outputs_text(cell: Any) -> str:
    """What a terminal can show of a cell's outputs."""
    parts = []
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        # text/plain: the answer itself (its text/markdown is escaped for a renderer)
        text = output.get("text") or data.get("text/plain") or data.get("text/markdown", "")
        if output.get("output_type") == "error":
            text = f"{output.get('ename')}: {output.get('evalue')}"
        if text:
            parts.append(text if text.endswith("\n") else text + "\n")
    return "".join(parts)


def approvals(notebook: Any) -> list[str]:
    """The `--approve` of each `%%agent` cell of `notebook` ("ask (the default)" where a
    cell gives none)."""
    found = []
    for cell in notebook.cells:
        first = cell.get("source", "").split("\n", 1)[0]
        if cell.get("cell_type") == "code" and first.split()[:1] == ["%%agent"]:
            given = APPROVE.search(first)
            found.append(given[1] if given else "ask (the default)")
    return found


def example_notebook(name: str) -> bytes:
    """An example notebook: shipped in a wheel's `tiny_agent_nb/examples/`; in a clone or
    an editable install, the repository's `notebooks/` beside the package."""
    shipped = resources.files("tiny_agent_nb") / "examples" / name
    if shipped.is_file():
        return shipped.read_bytes()
    return (Path(__file__).resolve().parent.parent / "notebooks" / name).read_bytes()


def main(directory: Path | None = None) -> int:
    import nbformat  # noqa: PLC0415

    work = directory or Path(tempfile.mkdtemp(prefix="tiny-agent-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    path = work / NOTEBOOK
    path.write_bytes(example_notebook(NOTEBOOK))
    env = dict(os.environ)
    env["JPY_SESSION_NAME"] = str(path)  # the session file goes beside the notebook
    real = (
        env.get("TINY_AGENT_API_KEY")
        or env.get("OPENROUTER_API_KEY")
        or env.get("TINY_AGENT_BASE_URL")
    )
    print(f"tiny-agent-nb demo: running {NOTEBOOK} headless in {work}")
    print(
        "  model: "
        + (
            "the configured endpoint (real model)"
            if real
            else "OFFLINE DEMO MODEL (scripted, not a real LLM)"
        )
    )
    print("  A cell of this notebook kills its own kernel mid-tool; a new kernel then resumes.")
    notebook = nbformat.read(path, as_version=4)
    print(
        f"  approval: {', '.join(approvals(notebook))}, as its %%agent cell says (the default, "
        "ask, asks before each command; headless, with nobody to answer, it would not run)\n"
    )

    def show(index: int, cell: Any, died: bool) -> None:
        if cell.get("cell_type") != "code":
            return
        first = cell.get("source", "").splitlines()[:1]
        print(f"[{index}] {first[0] if first else ''}")
        text = outputs_text(cell)
        if text:
            print("    " + text.rstrip("\n").replace("\n", "\n    "))
        if died:
            print(
                "    ✝ the kernel died here (kill -9 from inside the tool); starting a new kernel"
            )

    run = run_notebook(notebook, cwd=work, env=env, on_cell=show)
    nbformat.write(run.notebook, path)
    session = path.with_name(f"{path.stem}.agent.jsonl")  # its timeline was a cell's output
    print(f"\nexecuted notebook: {path}\nsession file:      {session}")
    print(f"({run.seconds:.1f}s, kernel restarted after cell(s) {run.restarts})")
    return 0
