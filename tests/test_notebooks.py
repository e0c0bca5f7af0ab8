"""The shipped notebooks, executed with nbclient in real kernels (copies in tmp_path; the
committed files stay output-free).

Each runs two ways: against a scripted OpenAI-compatible server on loopback (the way
they run against OpenRouter or a local server: `TINY_AGENT_BASE_URL`), and with nothing
configured, where the extension falls back to its offline demo model (scripted, runs
the prompt's ```bash blocks).

crash-and-resume.ipynb kills its own kernel from inside a bash tool call
(`kill -9 $TINY_AGENT_KERNEL_PID`); `run_notebook` restarts the kernel after that cell, as
Jupyter does.

nbformat is imported by the tests that read notebooks: it imports jsonschema, whose format
checkers build a grammar at import (~0.8 s), and every worker of a parallel run imports
this module to collect it.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.demo import DIES_TAG, run_notebook
from tiny_agent_nb.provider import messages
from tiny_agent_nb.session import load_session

from helpers.kernel_helpers import kernel_env
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CRASH_COMMAND = "echo ran >> marker.txt; kill -9 $TINY_AGENT_KERNEL_PID"
DATA_COMMAND = "cat numbers.csv"
DEMO_NOTE = "no API key and no base URL configured, so %%agent cells use the\n  OFFLINE DEMO MODEL"
# Offline runs must not reach out: should anything try, it meets a closed loopback port.
NOWHERE = {
    **{name: "http://127.0.0.1:9" for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY")},
    "NO_PROXY": "",
    "no_proxy": "",
}


@dataclass
class Executed:
    name: str
    notebook: Any  # with outputs
    restarts: list[int]  # cells after which the kernel was restarted
    workdir: Path

    @property
    def session(self) -> Path:
        return self.workdir / self.name.replace(".ipynb", ".agent.jsonl")


def execute(name: str, tmp_path: Path, server: OpenAIServer | None) -> Executed:
    """Run examples/NAME in a copy under tmp_path; the kernel is told the copy's path,
    so the session file is the copy's NAME.agent.jsonl. Without a server: nothing is
    configured (no endpoint, no model, no key)."""
    workdir = tmp_path / "nb"
    workdir.mkdir()
    copy = workdir / name
    shutil.copyfile(NOTEBOOKS / name, copy)
    import nbformat  # noqa: PLC0415

    notebook = nbformat.read(copy, as_version=4)
    if server is not None:
        env = kernel_env(tmp_path, base_url=server.base_url, notebook=copy)
    else:
        env = kernel_env(tmp_path, base_url=None, model=None, notebook=copy, extra=NOWHERE)
    run = run_notebook(notebook, cwd=workdir, env=env, timeout=60)
    nbformat.write(run.notebook, copy)  # for a look after a failure
    return Executed(name, run.notebook, run.restarts, workdir)


def outputs_text(cell: Any) -> str:
    """Stream text and the plain text of displays of one cell, in order (an answer's
    text/plain is the answer as written; its text/markdown is escaped for a renderer)."""
    parts = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            parts.append(output["text"])
        elif output["output_type"] in ("display_data", "execute_result"):
            data = output["data"]
            parts.append(data.get("text/plain", ""))
        elif output["output_type"] == "error":
            parts.append(f"{output['ename']}: {output['evalue']}")
    return "".join(parts)


def find_cells(notebook: Any, source: str) -> list[Any]:
    return [c for c in notebook.cells if c.cell_type == "code" and c.source.startswith(source)]


def find_cell(notebook: Any, source: str) -> Any:
    """The one code cell whose source starts with `source`."""
    found = find_cells(notebook, source)
    assert len(found) == 1, f"{len(found)} cells start with {source!r}"
    return found[0]


def timeline(notebook: Any) -> dict[str, str]:
    (display,) = [
        o for o in find_cell(notebook, "%agent timeline").outputs if o.output_type == "display_data"
    ]
    # rich output a saved notebook keeps and shows with no kernel: no widget model to lose
    assert "application/vnd.jupyter.widget-view+json" not in display.data
    assert {"text/html", "text/plain"} <= set(display.data)
    return dict(display.data)


def statuses(html: str, kind: str) -> list[str]:
    """data-status of every timeline element of `kind` (run, attempt, tool), in order."""
    return re.findall(rf'class="tan-{kind}"[^>]*data-status="([a-z]+)"', html)


def assert_no_errors(notebook: Any) -> None:
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", (cell.source, output)
            if output["output_type"] == "stream":
                assert output["name"] == "stdout", (cell.source, output["text"])


@pytest.mark.parametrize("name", ["quickstart.ipynb", "crash-and-resume.ipynb"])
def test_committed_notebooks_have_no_outputs_and_name_no_endpoint(name: str) -> None:
    import nbformat  # noqa: PLC0415

    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source
    code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    active = [line for line in code.splitlines() if not line.lstrip().startswith("#")]
    assert not any("http" in line or "api_key" in line for line in active), active


# ------------------------------------------------------------------ quickstart


def check_quickstart(run: Executed) -> str:
    """What holds whatever the model; returns the agent cell's output."""
    assert run.restarts == []
    notebook = run.notebook
    assert_no_errors(notebook)
    loaded = outputs_text(find_cell(notebook, "%load_ext tiny_agent_nb"))
    assert loaded.startswith(
        "tiny-agent-nb: new session quickstart.agent.jsonl (beside this notebook).\n"
    )
    status = outputs_text(find_cell(notebook, "# %config"))
    assert f"session  {run.session}" in status
    assert "runs     0; facts 1" in status  # the kernel's own record
    assert outputs_text(find_cell(notebook, "from pathlib import Path")) == "n\n3\n4\n5\n\n"

    output = outputs_text(find_cell(notebook, "%%agent"))
    assert f"→ bash command={json.dumps(DATA_COMMAND)}" in output
    assert "✓ bash completed" in output

    data = timeline(notebook)
    assert statuses(data["text/html"], "run") == ["completed"]
    assert statuses(data["text/html"], "attempt") == ["settled", "settled"]
    assert statuses(data["text/html"], "tool") == ["completed"]
    assert "bash" in data["text/plain"]

    usage = outputs_text(find_cell(notebook, "%agent usage"))
    # `tiny-agent-nb usage`'s table: run 1's row, the total row, the total cost
    assert re.search(r"^1\s+run\s+completed(\s+\d+){4}\s+\S", usage, re.M), usage
    assert re.search(r"^\s+total(\s+\d+){4}\s+\S", usage, re.M) and "\ntotal cost " in usage

    state = load_session(run.session)
    assert [op.status for op in state.operations.values()] == ["completed"]
    return output


def test_quickstart(tmp_path: Path, server: OpenAIServer) -> None:
    server.enqueue(
        tool_calls_reply(tool_call("call_cat", "bash", {"command": DATA_COMMAND})),
        text_reply("The numbers in `n` add up to **12**."),
    )
    run = execute("quickstart.ipynb", tmp_path, server)
    output = check_quickstart(run)
    assert output.endswith("The numbers in `n` add up to **12**.")
    status = outputs_text(find_cell(run.notebook, "# %config"))
    assert "model    openai-compatible / test/model" in status

    # {data_file} was filled in (the bash block is sent as written); the tool's result
    # went back to the model
    first, second = server.requests
    prompt = first.body["messages"][-1]
    assert prompt["role"] == "user"
    # after the notebook's own cells that ran before it (docs/spec.md §6)
    assert messages.prompt_of(prompt["content"]).startswith(
        "What is the sum of the numbers in the `n` column of numbers.csv?"
    )
    assert f"```bash\n{DATA_COMMAND}\n```" in prompt["content"]
    assert second.status == 200, second.problem
    result = second.body["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_cat"
    assert "n\n3\n4\n5" in result["content"]

    usage = outputs_text(find_cell(run.notebook, "%agent usage"))
    assert re.search(r"^1\s+run\s+completed\s+24\s+10\s+0\s+0\s+unknown\s", usage, re.M), usage


def test_quickstart_offline_demo(tmp_path: Path) -> None:
    run = execute("quickstart.ipynb", tmp_path, None)
    output = check_quickstart(run)
    loaded = outputs_text(find_cell(run.notebook, "%load_ext tiny_agent_nb"))
    assert DEMO_NOTE in loaded
    # The banner says the approval its commands run under (the test kernel's, "auto").
    assert 'It runs each command without asking (TinyAgent.approve = "auto")' in loaded
    assert "offline demo model (scripted, not a real LLM)" in output
    # the whole output, not its last line: the user can add up 3 + 4 + 5 themselves
    assert f"`{DATA_COMMAND}` → ran; its output:\n  ```\n  n\n  3\n  4\n  5\n  ```" in output
    assert load_session(run.session).header.provider == "offline-demo"


# ------------------------------------------------------------------ crash and resume


def check_crash_and_resume(run: Executed) -> str:
    """What holds whatever the model; returns the output of `%agent resume`."""
    notebook = run.notebook
    # the kernel died in the tagged cell, and only there; it was restarted once
    (dying,) = [c for c in notebook.cells if DIES_TAG in c.metadata.get("tags", [])]
    assert run.restarts == [notebook.cells.index(dying)]
    assert dying.source.startswith("%%agent")
    assert_no_errors(notebook)

    # the new kernel's %load_ext reports the interrupted bash call
    first_load, second_load = find_cells(notebook, "%load_ext tiny_agent_nb")
    assert outputs_text(first_load).startswith("tiny-agent-nb: new session crash-and-resume")
    report = outputs_text(second_load)
    assert report.startswith(
        "tiny-agent-nb: session crash-and-resume.agent.jsonl (beside this notebook) — 1 run(s)"
    )
    assert "The previous kernel stopped during a run; it is now marked interrupted." in report
    assert (
        f"⚠ bash command={json.dumps(CRASH_COMMAND)}, timeout=120.0 interrupted — "
        "it may have run; it was not run again." in report
    )
    assert "`%agent resume` continues the interrupted run." in report

    # the command ran exactly once
    assert (
        outputs_text(find_cell(notebook, "from pathlib import Path  # a new kernel")) == "['ran']\n"
    )
    assert (run.workdir / "marker.txt").read_text() == "ran\n"

    data = timeline(notebook)
    assert statuses(data["text/html"], "run") == ["interrupted", "completed"]
    assert statuses(data["text/html"], "tool") == ["interrupted"]
    assert "Its effect may or may not have happened; the result is unknown." in data["text/html"]

    status = outputs_text(find_cell(notebook, "%agent status"))
    assert "latest   resume completed" in status
    # The resume settled the interrupted call: it is the timeline's history, not a call
    # status lists as left interrupted (status lists only what a resume would continue).
    assert "⚠ bash" not in status

    state = load_session(run.session)
    assert [(op.kind, op.status) for op in state.operations.values()] == [
        ("run", "interrupted"),
        ("resume", "completed"),
    ]
    assert [i.status for i in state.tool_intents.values()] == ["interrupted"]
    return outputs_text(find_cell(notebook, "%agent resume"))


def test_crash_and_resume(tmp_path: Path, server: OpenAIServer) -> None:
    answer = "The command was interrupted when the kernel died; I did not run it again."
    server.enqueue(
        tool_calls_reply(tool_call("call_crash", "bash", {"command": CRASH_COMMAND})),
        text_reply(answer),
    )
    run = execute("crash-and-resume.ipynb", tmp_path, server)
    assert check_crash_and_resume(run).endswith(answer)

    # resume: the next request is a valid conversation carrying the interrupted result
    assert len(server.requests) == 2
    resumed = server.requests[1]
    assert resumed.status == 200, resumed.problem
    messages = resumed.body["messages"]
    assert messages[-3]["tool_calls"][0]["id"] == "call_crash"
    assert messages[-2]["role"] == "tool" and messages[-2]["tool_call_id"] == "call_crash"
    assert messages[-2]["content"].startswith("Interrupted: the process stopped")
    assert messages[-1]["content"].startswith("[Kernel restarted]")  # told after them
