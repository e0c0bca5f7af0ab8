"""Real Jupyter kernels for the notebook tests, and a notebook runner that survives a
kernel death.

    kernel = Kernel.start(cwd=workspace, env=kernel_env(workspace, base_url=server.base_url))
    run = kernel.execute("%load_ext tiny_agent_nb")
    assert "new session analysis.agent.jsonl" in run.stdout
    kernel.shutdown()

`Kernel` wraps jupyter_client's `KernelManager` and a `BlockingKernelClient`; `execute`
collects what the cell sent on iopub (stream text, errors, rich displays) and the
execute reply's pager payloads (`%%agent?` answers with a payload, not with output).

`run_notebook` (tiny_agent_nb.demo, also behind `tiny-agent-nb demo`) executes a
notebook with nbclient cell by cell. A cell tagged `kernel-dies` is expected to kill its
own kernel: the runner then restarts the kernel (as JupyterLab does when a kernel dies)
and goes on with the next cell. As a command:

    PYTHONPATH=tests python -m helpers.kernel_helpers \
        notebooks/crash-and-resume.ipynb [-o OUT.ipynb]

runs the notebook in its own directory, with `JPY_SESSION_NAME` set to the notebook (so
the session file is `<name>.agent.jsonl` beside it, as under Jupyter) and the model
endpoint from the environment (`TINY_AGENT_BASE_URL`, `TINY_AGENT_MODEL`, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import IO, Any

import pytest
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.manager import KernelManager
from jupyter_core.paths import jupyter_runtime_dir

from tiny_agent_nb.demo import outputs_text, run_notebook

from helpers.openai_server import OpenAIServer
from helpers.polling import wait_until

KERNEL_NAME = "python3"
STARTUP_TIMEOUT = 60.0
EXECUTE_TIMEOUT = 60.0

# Variables a test kernel must not inherit from the developer's shell: the endpoint, the
# model and the keys are set per test, and the notebook name decides the session file.
SCRUBBED = (
    "TINY_AGENT_BASE_URL",
    "TINY_AGENT_MODEL",
    "TINY_AGENT_API_KEY",
    "OPENROUTER_API_KEY",
    "TINY_AGENT_DEMO",
    "JPY_SESSION_NAME",
)


def kernel_env(
    home: Path,
    *,
    base_url: str | None,
    notebook: Path | None = None,
    model: str | None = "test/model",
    extra: Mapping[str, str] | None = None,
    approve: str | None = "auto",
) -> dict[str, str]:
    """The environment of a test kernel: this process's, minus endpoint/keys, with the
    loopback endpoint, the notebook name, and IPython/Jupyter state kept under `home`.
    `approve`: `TinyAgent.approve` in that IPython's `ipython_config.py`, as a user sets
    it for every kernel: `auto` for the tests that are not about approval (no one
    answers a question there); None leaves the product's default."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["IPYTHONDIR"] = str(home / ".ipython")
    configure_approval(home / ".ipython", approve)
    env["JUPYTER_RUNTIME_DIR"] = str(home / ".jupyter-runtime")
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    if base_url is not None:
        env["TINY_AGENT_BASE_URL"] = base_url
    if model is not None:
        env["TINY_AGENT_MODEL"] = model
    if notebook is not None:
        env["JPY_SESSION_NAME"] = str(notebook)
    env.update(extra or {})
    return env


def configure_approval(ipython_dir: Path, approve: str | None) -> None:
    """`TinyAgent.approve` for the kernels of `ipython_dir` (IPYTHONDIR), in its
    `ipython_config.py` as a user sets it for every kernel; None: the product's default."""
    profile = ipython_dir / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    setting = "" if approve is None else f"c.TinyAgent.approve = {approve!r}\n"
    (profile / "ipython_config.py").write_text(setting, encoding="utf-8")


@dataclass
class Execution:
    """What one execute request produced."""

    msg_id: str
    stdout: str = ""
    stderr: str = ""
    error: dict[str, Any] | None = None  # the iopub `error` content: ename, evalue, traceback
    displays: list[dict[str, Any]] = field(default_factory=list)  # display/result mimebundles
    # (msg_type, display_id or None, data) of each of them, in order
    display_messages: list[tuple[str, str | None, dict[str, Any]]] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)  # pager payloads (e.g. `%%agent?`)
    reply: dict[str, Any] | None = None  # the execute_reply content
    finished: bool = False  # the kernel went idle for this request

    def __iter__(self) -> Any:
        """`stdout, stderr, error, displays = kernel.execute(code)`."""
        return iter((self.stdout, self.stderr, self.error, self.displays))


class Kernel:
    """One real IPython kernel process, started in `cwd` with `env`."""

    def __init__(
        self,
        km: KernelManager,
        kc: BlockingKernelClient,
        log: IO[bytes],
        sockets: Path,
        *,
        cwd: Path,
        env: Mapping[str, str],
    ) -> None:
        self.km = km
        self.kc = kc
        self._log = log
        self._log_start = 0  # where the current test's part of the log begins (a shared kernel)
        self._sockets = sockets
        self.cwd = cwd  # where a restart starts it, and with what environment
        self.env = env

    @classmethod
    def start(cls, *, cwd: Path, env: Mapping[str, str]) -> Kernel:
        """Start a kernel; its connection file and its own stdout/stderr (`kernel-*.log`)
        go to `JUPYTER_RUNTIME_DIR` of `env`."""
        runtime = Path(env.get("JUPYTER_RUNTIME_DIR") or cwd)
        runtime.mkdir(parents=True, exist_ok=True)
        name = f"kernel-{uuid.uuid4().hex[:12]}"
        # Its channels are socket files (ipc), as the demo's are, not TCP ports: a port
        # jupyter_client picks by binding and releasing it can be taken by another process
        # before the kernel binds it (parallel test workers start kernels and servers at
        # once), and the kernel then dies at start. A Unix socket's path must stay under
        # 108 bytes, which tmp_path does not promise: a short directory of their own.
        sockets = Path(tempfile.mkdtemp(prefix="tan-kernel-"))
        km = KernelManager(
            kernel_name=KERNEL_NAME,
            connection_file=str(runtime / f"{name}.json"),
            transport="ipc",
            ip=str(sockets / "k"),
        )
        log = (runtime / f"{name}.log").open("wb")
        km.start_kernel(cwd=str(cwd), env=dict(env), stdout=log, stderr=log)
        kc = km.blocking_client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=STARTUP_TIMEOUT)
        except BaseException:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
            log.close()
            shutil.rmtree(sockets, ignore_errors=True)
            # Why it did not start is in what the kernel process wrote (shown with the failure).
            log_text = Path(log.name).read_text(encoding="utf-8", errors="replace")
            print(f"kernel {name} did not start; it wrote:\n{log_text}", file=sys.stderr)
            raise
        return cls(km, kc, log, sockets, cwd=cwd, env=env)

    @property
    def log_text(self) -> str:
        """What the kernel process itself wrote to stdout/stderr (not cell output)."""
        self._log.flush()
        with Path(self._log.name).open("rb") as log:
            log.seek(self._log_start)
            return log.read().decode("utf-8", errors="replace")

    @property
    def pid(self) -> int:
        """The kernel process itself (jupyter_client 8: the provisioner launched it)."""
        pid = getattr(self.km.provisioner, "pid", None)
        assert isinstance(pid, int), "the kernel has no local process"
        return pid

    def is_alive(self) -> bool:
        return bool(self.km.is_alive())

    # ---------------------------------------------------------------- execution
    def send(self, code: str, *, quietly: bool = False) -> Execution:
        """Start executing `code`; `collect` gathers its output. `quietly`: kept out of
        the history and the cell count, as the test's own cells do not see it."""
        msg_id = self.kc.execute(
            code, store_history=not quietly, allow_stdin=False, stop_on_error=False
        )
        return Execution(msg_id=msg_id)

    def collect(
        self, run: Execution, timeout: float = EXECUTE_TIMEOUT, *, until_dead: bool = False
    ) -> Execution:
        """Read iopub messages of `run` until the kernel is idle again (or, with
        `until_dead`, until the kernel process is gone)."""
        deadline = time.monotonic() + timeout
        while not run.finished:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no idle status in {timeout}s; so far: {run!r}")
            try:
                msg = self.kc.get_iopub_msg(timeout=min(remaining, 0.2))
            except Empty:
                if not self.is_alive():
                    if until_dead:
                        return run
                    raise AssertionError(
                        f"the kernel died during {run!r}; its log:\n{self.log_text}"
                    ) from None
                continue
            if msg["parent_header"].get("msg_id") == run.msg_id:
                _absorb(run, msg)
        if not until_dead:
            run.reply = self._reply(run.msg_id, deadline)
            for payload in run.reply.get("payload", []):
                if payload.get("source") == "page":
                    run.pages.append(payload["data"].get("text/plain", ""))
        return run

    def execute(self, code: str, timeout: float = EXECUTE_TIMEOUT) -> Execution:
        return self.collect(self.send(code), timeout)

    def _reply(self, msg_id: str, deadline: float) -> dict[str, Any]:
        while True:
            msg = self.kc.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.1))
            if msg["parent_header"].get("msg_id") == msg_id:
                content: dict[str, Any] = msg["content"]
                return content

    # ---------------------------------------------------------------- lifecycle
    def interrupt(self) -> None:
        self.km.interrupt_kernel()

    def restart(self) -> None:
        """Restart the kernel as a Jupyter server does: a new process on the same
        connection file (so with the same kernel id), the notebook's environment kept."""
        self.km.restart_kernel(now=True, cwd=str(self.cwd), env=dict(self.env))
        self.kc.wait_for_ready(timeout=STARTUP_TIMEOUT)

    def sigkill(self, timeout: float = 30.0) -> None:
        """SIGKILL the kernel process, like the OOM killer, and wait until it is gone."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        wait_until(lambda: not self.is_alive(), timeout, what="kernel process gone")

    def shutdown(self) -> None:
        self.kc.stop_channels()
        if self.is_alive():
            self.km.shutdown_kernel(now=True)
        else:
            self.km.cleanup_resources()
        self._log.close()
        shutil.rmtree(self._sockets, ignore_errors=True)


def _absorb(run: Execution, msg: dict[str, Any]) -> None:
    kind, content = msg["header"]["msg_type"], msg["content"]
    if kind == "stream":
        if content["name"] == "stdout":
            run.stdout += content["text"]
        else:
            run.stderr += content["text"]
    elif kind == "error":
        run.error = content
    elif kind in ("display_data", "update_display_data", "execute_result"):
        run.displays.append(content["data"])
        display_id = (content.get("transient") or {}).get("display_id")
        run.display_messages.append((kind, display_id, content["data"]))
    elif kind == "status" and content["execution_state"] == "idle":
        run.finished = True


def stray_commands(directory: Path, exclude: Sequence[int] = ()) -> list[int]:
    """Commands working in `directory` that lead a session of their own, apart from
    `exclude`. The bash tool starts every command that way, so once the kernels are
    accounted for these are commands a killed kernel left running (its `sleep 60`)."""
    found = []
    target = directory.resolve()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        pid = int(entry.name)
        try:
            cwd = (entry / "cwd").resolve(strict=True)
            if (cwd == target or target in cwd.parents) and os.getsid(pid) == pid:
                found.append(pid)
        except (OSError, RuntimeError):
            continue  # gone meanwhile, or not ours to inspect
    return found


def stop_commands(pids: Sequence[int], timeout: float = 10.0) -> None:
    """SIGKILL each command's process group (by id) and wait until they are gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: not any(_running(pid) for pid in pids), timeout, what=f"{pids} stopped")


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has stopped; its reaper is not us


# -------------------------------------------------------------------- notebooks


def notebook_env(notebook: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["JPY_SESSION_NAME"] = str(notebook.resolve())
    return env


# ---------------------------------------------------------------- fixtures

NOTEBOOK = "analysis.ipynb"
StartKernel = Callable[..., Kernel]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The notebook's folder, the kernels' working directory (tmp_path/work)."""
    root = tmp_path / "work"
    root.mkdir()
    return root


@pytest.fixture
def start_kernel(
    tmp_path: Path, workspace: Path, server: OpenAIServer, kernel_pool: KernelPool
) -> Iterator[StartKernel]:
    """Start kernels on the workspace's analysis.ipynb whose model is the loopback `server`
    (`kernel_env`'s options as keywords); all are shut down afterwards, and any command a
    killed kernel left running is stopped.

    `shared=True` (or a name, for kernels a test changed in a way only tests of that name
    may share) takes an idle kernel of this test process instead, as a new kernel would
    be: see `KernelPool`. For a test that needs no process of its own (it does not kill
    or restart the kernel, nor count its processes)."""
    started: list[Kernel] = []
    shared_kernels: list[Kernel] = []

    def start(*, shared: bool | str = False, **env_options: object) -> Kernel:
        options = {"base_url": server.base_url, **env_options}
        if shared:
            kernel = kernel_pool.take(str(shared), workspace, options)
            shared_kernels.append(kernel)
            return kernel
        env = kernel_env(tmp_path, notebook=workspace / NOTEBOOK, **options)  # type: ignore[arg-type]
        kernel = Kernel.start(cwd=workspace, env=env)
        started.append(kernel)
        return kernel

    yield start
    for kernel in shared_kernels:
        kernel_pool.give_back(kernel)
    for kernel in started:
        kernel.shutdown()
    stop_commands(stray_commands(workspace))


# What a kernel taken from the pool runs first: the state a new kernel would have, in the
# test's folder, with the test's environment and the `TinyAgent` settings its IPython
# profile gives (a `%config` is kept there). `reset(new_session=True)` empties the
# namespace and the history and counts cells from 1 again, as a new kernel does.
_ENTER = """\
import os as _os
_os.chdir({cwd!r})
for _name in {scrubbed!r}:
    _os.environ.pop(_name, None)
_os.environ.update({env!r})
from traitlets.config import Config as _Config
get_ipython().config.TinyAgent = _Config({config!r})
get_ipython().reset(new_session=True)
"""
# What it runs when its test is over: the extension unloaded (its session closed, its lock
# released, its controls withdrawn) and the folder left.
_LEAVE = """\
import os as _os
if "tiny_agent_nb" in get_ipython().extension_manager.loaded:
    get_ipython().extension_manager.unload_extension("tiny_agent_nb")
_os.chdir({home!r})
"""


Kind = tuple[str, str | None, tuple[tuple[str, str], ...]]  # tag, approve, extra variables


class KernelPool:
    """Idle kernels of one test process, kept between the tests that share them.

    A kernel start with `%load_ext` is about 1 s of CPU, and the notebook tests start
    hundreds of them: most need a kernel in its first state, not a new process. A kernel
    is given back alive, its extension unloaded; it is shared only by tests of its kind
    (the same tag, `approve` and `extra` variables, which it started with), and a restart
    starts it in the environment of the test that has it. Each kernel serves at most
    `USES` tests, so what unloading leaves behind (a thread, a subshell) stays small."""

    USES = 16
    IDLE = 3

    def __init__(self, home: Path) -> None:
        self.home = home
        self.idle: list[tuple[Kind, Kernel]] = []
        self.kind_of: dict[Kernel, Kind] = {}
        self.uses: dict[Kernel, int] = {}

    def take(self, tag: str, cwd: Path, options: Mapping[str, Any]) -> Kernel:
        """A kernel in `cwd` with `kernel_env`'s `options`, its extension not loaded."""
        approve = options.get("approve", "auto")
        extra: Mapping[str, str] = options.get("extra") or {}
        kind: Kind = (tag, approve, tuple(sorted(extra.items())))
        alive = (k for idle_kind, k in self.idle if idle_kind == kind and k.is_alive())
        found = next(alive, None)
        if found is None:
            home = Path(tempfile.mkdtemp(prefix="kernel-", dir=self.home))
            env = kernel_env(home, base_url=None, model=None, extra=extra, approve=approve)
            kernel = Kernel.start(cwd=home, env=env)
            self.kind_of[kernel], self.uses[kernel] = kind, 0
        else:
            kernel = found
            self.idle.remove((kind, kernel))
        self.uses[kernel] += 1
        kernel._log_start = Path(kernel._log.name).stat().st_size
        # The test's environment, also for a restart (its IPython directory the kernel's)
        home = Path(kernel.env["IPYTHONDIR"]).parent
        kernel.cwd = cwd
        kernel.env = kernel_env(home, notebook=cwd / NOTEBOOK, **options)
        names = (*SCRUBBED, *extra)
        variables = {name: kernel.env[name] for name in names if name in kernel.env}
        settings = {} if approve is None else {"approve": approve}
        enter = _ENTER.format(cwd=str(cwd), scrubbed=SCRUBBED, env=variables, config=settings)
        entered = kernel.collect(kernel.send(enter, quietly=True))
        assert entered.error is None, entered.error
        return kernel

    def give_back(self, kernel: Kernel) -> None:
        """Keep `kernel` for the next test of its kind, if it can serve one."""
        kept = kernel.is_alive() and self.uses[kernel] < self.USES
        if kept:
            try:
                left = kernel.collect(
                    kernel.send(_LEAVE.format(home=str(self.home)), quietly=True), 30
                )
                kept = left.error is None
            except (TimeoutError, AssertionError, Empty):  # busy, dead, or no reply
                kept = False
        if not kept:
            self._retire(kernel)
            return
        self.idle.append((self.kind_of[kernel], kernel))
        if len(self.idle) > self.IDLE:
            self._retire(self.idle.pop(0)[1])

    def _retire(self, kernel: Kernel) -> None:
        del self.kind_of[kernel], self.uses[kernel]
        kernel.shutdown()

    def close(self) -> None:
        for _, kernel in self.idle:
            kernel.shutdown()
        self.idle.clear()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a notebook, restarting dead kernels.")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("-o", "--output", type=Path, help="write the executed notebook here")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per cell")
    # nbformat imports jsonschema, whose format checkers build a grammar at import
    # (~0.8 s): every test worker imports this module, only the command reads notebooks.
    import nbformat  # noqa: PLC0415

    args = parser.parse_args(argv)
    path: Path = args.notebook.resolve()
    notebook = nbformat.read(path, as_version=4)
    run = run_notebook(
        notebook,
        cwd=path.parent,
        env=notebook_env(path),
        timeout=args.timeout,
        connection_dir=Path(jupyter_runtime_dir()),
    )
    for index, cell in enumerate(run.notebook.cells):
        print(outputs_text(cell), end="")
        if index in run.restarts:
            print(f"-- the kernel died in cell {index}, as that cell intends; restarted it")
    if args.output is not None:
        nbformat.write(run.notebook, args.output)
    print(f"-- ran {path.name} in {run.seconds:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
