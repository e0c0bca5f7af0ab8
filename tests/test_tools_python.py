"""The python tool: the notebook's namespace, REPL-style values, tracebacks as results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb._guard import ADOPTS
from tiny_agent_nb.tools import ToolContext, ToolOutput
from tiny_agent_nb.tools._python import Python

from helpers.polling import wait_until


def run(code: str, namespace: dict[str, Any] | None = None, limit: int = 30_000) -> ToolOutput:
    context = ToolContext(workspace=Path.cwd(), namespace=namespace, output_limit=limit)
    tool = Python()
    return tool.run(tool.effective_arguments({"code": code}), context)


def test_variables_persist_in_the_notebook_namespace() -> None:
    namespace: dict[str, Any] = {"given_by_the_user": 20}
    assert run("x = given_by_the_user + 1", namespace) == ToolOutput("(no output)")
    assert namespace["x"] == 21
    assert run("x * 2", namespace).content == "42"


def test_without_a_namespace_each_call_starts_fresh() -> None:
    assert not run("y = 1").is_error
    out = run("y")
    assert out.is_error
    assert "NameError: name 'y' is not defined" in out.content


def test_the_last_expression_is_shown_like_a_repl() -> None:
    assert run("'a' + 'b'").content == "'ab'"
    assert run("x = 1\nx + 1").content == "2"
    assert run("None").content == "(no output)"
    assert run("[1, 2]\nz = 3").content == "(no output)"  # last statement is not an expression


def test_stdout_and_stderr_are_captured_in_order() -> None:
    before = sys.stdout, sys.stderr
    out = run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nprint('out again')\n7")
    assert out == ToolOutput("out\nerr\nout again\n7")
    assert (sys.stdout, sys.stderr) == before


def test_an_exception_is_an_error_result_with_the_traceback() -> None:
    out = run("def f():\n    return 1 / 0\n\nprint('before')\nf()")
    assert out.is_error
    lines = out.content.splitlines()
    assert lines[0] == "before"
    assert lines[1] == "Traceback (most recent call last):"
    assert "    return 1 / 0" in lines
    assert lines[-1] == "ZeroDivisionError: division by zero"
    assert "_python.py" not in out.content  # only the model's own code is shown


def test_a_syntax_error_is_an_error_result() -> None:
    out = run("1 +")
    assert out.is_error
    assert out.content.splitlines()[-1].startswith("SyntaxError")
    assert "Traceback" not in out.content


def test_exit_does_not_end_the_kernel() -> None:
    out = run("raise SystemExit(3)")
    assert out.is_error
    assert out.content.endswith("SystemExit: 3")


def test_keyboard_interrupt_propagates_and_restores_streams() -> None:
    before = sys.stdout, sys.stderr
    with pytest.raises(KeyboardInterrupt):
        run("print('partial')\nraise KeyboardInterrupt")
    assert (sys.stdout, sys.stderr) == before


def test_long_output_is_truncated() -> None:
    out = run("for i in range(10_000): print(i)", limit=200)
    assert "characters truncated" in out.content
    assert out.content.startswith("0\n1\n")
    assert out.content.endswith("9999")


@pytest.mark.parametrize(
    "code",
    [
        "raise GeneratorExit('from the model')",
        "class Stop(BaseException):\n    pass\n\nraise Stop('from the model')",
    ],
)
def test_code_raising_any_base_exception_is_an_error_result_not_a_crash(code: str) -> None:
    out = run(code)
    assert out.is_error
    assert out.content.splitlines()[-1].endswith("from the model")


def test_code_raising_keyboard_interrupt_still_stops_the_agent() -> None:
    with pytest.raises(KeyboardInterrupt):
        run("raise KeyboardInterrupt")


# ------------------------------------------------------ processes the code starts (Linux)

adopts = pytest.mark.skipif(not ADOPTS, reason="the kernel's sweeper reads /proc: Linux")
REPO = Path(__file__).resolve().parents[1]


@adopts
def test_what_the_code_starts_carries_the_sweepers_marker_only_while_it_runs() -> None:
    code = (
        "import subprocess\n"
        "command = ['sh', '-c', 'echo $TINY_AGENT_SWEEP']\n"
        "subprocess.run(command, capture_output=True, text=True).stdout.strip()"
    )
    marker = run(code).content.strip("'")
    assert marker.startswith(f"{os.getpid()}-")
    assert "TINY_AGENT_SWEEP" not in os.environ  # the user's own cells do not carry it
    assert run(code).content.strip("'") == marker  # one sweeper per kernel


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has stopped; its reaper is not us


# A kernel stand-in: runs the tool in its main thread, then waits to be SIGKILLed.
KERNEL = """
import sys
from pathlib import Path
from tiny_agent_nb.tools import ToolContext
from tiny_agent_nb.tools._python import Python

out = Python().run({"code": sys.argv[1]}, ToolContext(Path.cwd(), namespace={}))
print("returned", out.content, flush=True)
sys.stdin.readline()
"""

STARTS_PROCESSES = """
import os, subprocess
pids = [subprocess.Popen(["sleep", "300"]).pid]
pids.append(subprocess.Popen(["setsid", "sleep", "300"]).pid)
os.system("setsid sleep 300 > /dev/null 2>&1 & echo $! > daemon.pid")  # a shell's orphan
pids.append(int(open("daemon.pid").read()))
pids
"""


@adopts
def test_what_the_code_started_dies_with_the_kernel(tmp_path: Path) -> None:
    kernel = subprocess.Popen(
        [sys.executable, "-c", KERNEL, STARTS_PROCESSES],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pids: list[int] = []
    try:
        assert kernel.stdout is not None
        said = kernel.stdout.readline()
        assert said.startswith("returned ["), said
        pids = [int(pid) for pid in said.removeprefix("returned [").rstrip("]\n").split(",")]
        assert all(running(pid) for pid in pids)  # the call returned; they run on
        kernel.kill()
        kernel.wait()
        wait_until(lambda: not any(running(pid) for pid in pids), 30, what="all gone")
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        for pid in pids:
            if running(pid):
                os.kill(pid, 9)
