"""The python tool: code run in the notebook's own namespace, in the kernel process.

Variables the agent defines are there for the user's next cell and the other way round.
Like a REPL it shows the value of a final expression. An exception in the code is the
code's failure, not the tool's: an error result with the traceback, so the model can fix
its code. KeyboardInterrupt is not caught: the notebook's interrupt stops the agent. Only
sys.stdout / sys.stderr are captured; a subprocess writing to fd 1 prints to the kernel's.

A process the code starts is the kernel's own child, with no guard between them. On
Linux the kernel's sweeper (`_guard.py --sweep`, started with the first call) ends, when
the kernel dies, every process whose environment holds the marker this tool sets in
`os.environ` while the code runs. What drops the marker (a process that resets its
environment, a fork without exec, a thread started by the call) is not found, so a
recovery report says such a call's processes may still run.
"""

from __future__ import annotations

import ast
import io
import itertools
import linecache
import os
import subprocess
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from types import TracebackType
from typing import Any, ClassVar

from pydantic import Field

from .._guard import ADOPTS, sweep_argv
from ._base import BuiltinTool, ToolArguments, ToolContext, ToolOutput
from ._limits import truncate

_cell_numbers = itertools.count(1)


class PythonArguments(ToolArguments):
    code: str = Field(description="Python source to execute.")


class Python(BuiltinTool[PythonArguments]):
    name = "python"
    description = (
        "Execute Python code in the notebook's kernel and namespace: variables persist "
        "between calls and are shared with the notebook's cells. The result is what the "
        "code prints (stdout and stderr) followed by the repr of a final expression, as in "
        "a REPL; an exception comes back with its traceback."
    )
    Arguments = PythonArguments
    may_outlive_kernel: ClassVar[bool] = True  # see the module's docstring

    def execute(self, arguments: PythonArguments, context: ToolContext) -> ToolOutput:
        namespace = context.namespace if context.namespace is not None else {"__name__": "__main__"}
        filename = _remember_source(arguments.code)
        captured = io.StringIO()  # one buffer: prints and warnings stay in the order they happened
        is_error = False
        with redirect_stdout(captured), redirect_stderr(captured), marked_for_the_sweeper():
            try:
                value = _run(arguments.code, filename, namespace)
                if value is not None:
                    captured.write(repr(value) + "\n")
            except KeyboardInterrupt:
                raise
            # BaseException: exit() (SystemExit) must not end the kernel, and no other
            # exception the code raises (GeneratorExit, its own BaseException subclass)
            # may escape as if the tool were broken.
            except BaseException as exc:
                captured.write(
                    "".join(traceback.format_exception(type(exc), exc, _user_frames(exc)))
                )
                is_error = True
        text = captured.getvalue().rstrip("\n") or "(no output)"
        return ToolOutput(truncate(text, context.output_limit), is_error=is_error)


# The variable a process started by `python` code carries, naming this kernel's sweeper.
SWEEP_MARKER = "TINY_AGENT_SWEEP"


class _Sweeper:
    """The kernel's one sweeper process, started by the first call (a forked child's own)."""

    owner: int | None = None
    token = ""
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def marker(cls) -> str:
        if cls.owner != os.getpid() or cls.process is None or cls.process.poll() is not None:
            token = f"{os.getpid()}-{os.urandom(8).hex()}"
            main = threading.current_thread() is threading.main_thread()
            cls.process = subprocess.Popen(
                sweep_argv(f"{SWEEP_MARKER}={token}", thread_bound=main),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not in the kernel's group, which Jupyter kills
                cwd="/",  # it needs none: it must not hold the kernel's directory
            )
            cls.owner, cls.token = os.getpid(), token
        return cls.token


@contextmanager
def marked_for_the_sweeper() -> Iterator[None]:
    """While the code runs, what it starts inherits the sweeper's marker (Linux)."""
    if not ADOPTS:
        yield
        return
    token = _Sweeper.marker()
    previous = os.environ.get(SWEEP_MARKER)
    os.environ[SWEEP_MARKER] = token
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(SWEEP_MARKER, None)
        else:
            os.environ[SWEEP_MARKER] = previous


def _run(code: str, filename: str, namespace: dict[str, Any]) -> object:
    """Execute `code`; the value of its last statement if that is an expression."""
    # The builtin rather than ast.parse: a SyntaxError then carries no frame of the
    # standard library, and its traceback is just the user's line and caret.
    module = compile(code, filename, "exec", ast.PyCF_ONLY_AST)
    assert isinstance(module, ast.Module)
    last: ast.Expression | None = None
    final = module.body[-1] if module.body else None
    if isinstance(final, ast.Expr):
        module.body.pop()
        last = ast.Expression(final.value)
    exec(compile(module, filename, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(last, filename, "eval"), namespace)


def _remember_source(code: str) -> str:
    """A pseudo file name per call, in linecache, so tracebacks show the offending line
    (of a function defined in an earlier call too)."""
    filename = f"<agent-python-{next(_cell_numbers)}>"
    # mtime None marks it as not on disk: linecache.checkcache leaves such entries alone.
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    return filename


def _user_frames(exc: BaseException) -> TracebackType | None:
    """The traceback without this module's frames: the model should see its own code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb
