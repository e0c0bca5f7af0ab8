"""The README's main command: `tiny-agent-nb demo`, as a newcomer runs it (no key): it runs
the shipped crash-and-resume.ipynb headless with the offline demo model, which is that
notebook's offline run (tests/test_notebooks.py runs it against a loopback server)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_notebooks import (
    CRASH_COMMAND,
    DEMO_NOTE,
    NOWHERE,
    Executed,
    check_crash_and_resume,
    find_cells,
    outputs_text,
)

from tiny_agent_nb.session import load_session


@pytest.mark.slow
def test_demo_kills_a_kernel_mid_tool_and_resumes_with_the_offline_model(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "TINY_AGENT_BASE_URL",
            "TINY_AGENT_API_KEY",
            "OPENROUTER_API_KEY",
            "TINY_AGENT_MODEL",
        )
    }
    env.update(NOWHERE)  # offline, it must not reach out: should it try, a closed port
    env["NO_COLOR"] = "1"
    env["IPYTHONDIR"] = str(tmp_path / ".ipython")  # the kernel's history stays in tmp
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / ".jupyter-runtime")
    work = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "tiny_agent_nb", "demo", "--dir", str(work)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "OFFLINE DEMO MODEL (scripted, not a real LLM)" in out
    # Headless, nobody can answer a question: the demo says the approval its cell uses.
    assert "approval: auto, as its %%agent cell says" in out
    assert "the kernel died here" in out
    assert "interrupted — it may have run; it was not run again" in out
    assert (work / "marker.txt").read_text().splitlines() == ["ran"]  # ran once, never again
    state = load_session(work / "crash-and-resume.agent.jsonl")
    assert state.header.provider == "offline-demo"
    assert [(o.kind, o.status) for o in state.operations.values()] == [
        ("run", "interrupted"),
        ("resume", "completed"),
    ]
    assert [(i.tool.name, i.status) for i in state.tool_intents.values()] == [
        ("bash", "interrupted")
    ]
    assert "interrupted run" in out and "completed   resume" in out  # the printed timeline
    assert out.count("Agent timeline ·") == 1, out  # the timeline cell's, not again after it

    # The notebook it saved, with its outputs, as the offline run of the shipped notebook.
    import nbformat  # noqa: PLC0415 (jsonschema's import, for the tests that read notebooks)

    restarts = re.search(r"kernel restarted after cell\(s\) \[([\d, ]*)\]", out)
    assert restarts is not None, out
    notebook = nbformat.read(work / "crash-and-resume.ipynb", as_version=4)
    cells = [int(n) for n in restarts[1].split(",") if n.strip()]
    resumed = check_crash_and_resume(Executed("crash-and-resume.ipynb", notebook, cells, work))
    assert DEMO_NOTE in outputs_text(find_cells(notebook, "%load_ext tiny_agent_nb")[0])
    assert f"`{CRASH_COMMAND}` → **interrupted** — it may have run; it was not run again" in resumed
