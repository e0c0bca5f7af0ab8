"""A throwaway JupyterLab server for the browser test, and where the browser comes from.

`JupyterLab` runs `python -m jupyterlab` on 127.0.0.1 with a random port, a known token and
every Jupyter directory (config, data, runtime, settings, workspaces, IPython) inside a
temporary directory, so a developer's own settings never leak in and nothing is written
outside it. JupyterLab's first-run noise is switched off: the "official Jupyter news"
question (the announcements plugin is disabled in the page config, and news/update checks
are off in the settings) and windowed notebook rendering (all cells stay in the DOM, so a
widget below the fold can still be found). Its kernels run tools without asking
(`TinyAgent.approve = "auto"` in the IPython profile): a cell that asks says so itself.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

from helpers.kernel_helpers import configure_approval


def _default_chromium() -> Path:
    """Debian's `chromium-headless-shell` where it is installed, else its `chromium`.

    The same Blink, without the browser's own UI: Playwright's own choice for headless
    runs. A whole `chromium` spends more CPU (its browser process, and a renderer for
    its top-chrome web UI): on two cores, time taken from every other test of the run."""
    shell = Path("/usr/bin/chromium-headless-shell")
    return shell if shell.exists() else Path("/usr/bin/chromium")


CHROMIUM = Path(os.environ.get("TINY_AGENT_CHROMIUM") or _default_chromium())
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def artifacts_dir() -> Path:
    """`$TINY_AGENT_ARTIFACTS`, else `tiny-agent-nb-artifacts/` in the temp directory
    (tests write only to temporary directories; CI can point this anywhere it keeps)."""
    default = Path(tempfile.gettempdir()) / "tiny-agent-nb-artifacts"
    path = Path(os.environ.get("TINY_AGENT_ARTIFACTS") or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


# Plugin settings, written as the user's settings (`<plugin>.jupyterlab-settings`).
LAB_SETTINGS: dict[str, dict[str, object]] = {
    "@jupyterlab/apputils-extension/notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    # "full"/"defer"/"contentVisibility" may detach or skip off-screen cells.
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}
DISABLED_PLUGINS = ("@jupyterlab/apputils-extension:announcements",)


def notebook7_python() -> str | None:
    """A Python whose Jupyter serves Notebook 7: this one when it has the `notebook`
    package (the test extra installs it), else `$TINY_AGENT_NOTEBOOK_PYTHON`."""
    if importlib.util.find_spec("notebook") is not None:
        return sys.executable
    return os.environ.get("TINY_AGENT_NOTEBOOK_PYTHON") or None


class JupyterLab:
    """`with JupyterLab(root, home, env={...}) as lab: page.goto(lab.url("lab/tree/x"))`

    `app="notebook"` serves Notebook 7 (`notebooks/x.ipynb`) instead, from `python`; its
    kernels are still this Python's (a `python3` kernelspec of its own says so)."""

    def __init__(
        self,
        root: Path,
        home: Path,
        *,
        env: Mapping[str, str | None] = (),  # type: ignore[assignment]
        log_path: Path,
        startup_timeout: float = 60.0,
        app: str = "lab",
        python: str = sys.executable,
    ) -> None:
        self.app = app
        self.python = python
        self.root = root
        self.home = home
        self.extra_env = dict(env)
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.token = secrets.token_hex(16)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._log = None

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> JupyterLab:
        self._configure()
        for _ in range(3):  # another process may take the free port before we bind it
            self.port = free_port()
            self._spawn()
            if self._wait_ready():
                return self
            self.stop()
            if "already in use" not in self.log_tail():
                break
        raise RuntimeError(f"JupyterLab did not start; its log:\n{self.log_tail()}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}?token={self.token}"

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM (the server shuts its kernels down), then SIGKILL for the whole group."""
        proc, self.process = self.process, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            # kernels it left behind share its process group (its own session)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    # ------------------------------------------------------------ internals
    def _dirs(self) -> dict[str, Path]:
        return {
            name: self.home / name
            for name in ("config", "data", "runtime", "settings", "workspaces", "ipython")
        }

    def _configure(self) -> None:
        dirs = self._dirs()
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        _write_json(
            dirs["config"] / "labconfig" / "page_config.json",
            {"disabledExtensions": dict.fromkeys(DISABLED_PLUGINS, True)},
        )
        for plugin, values in LAB_SETTINGS.items():
            _write_json(dirs["settings"] / f"{plugin}.jupyterlab-settings", values)
        configure_approval(dirs["ipython"], "auto")
        if self.python != sys.executable:
            _write_json(
                dirs["data"] / "kernels" / "python3" / "kernel.json",
                {
                    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "Python 3 (ipykernel)",
                    "language": "python",
                },
            )

    def _environment(self) -> dict[str, str]:
        dirs = self._dirs()
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(dirs["config"]),
            JUPYTER_DATA_DIR=str(dirs["data"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
            IPYTHONDIR=str(dirs["ipython"]),
            PYTHONUNBUFFERED="1",
        )
        if self.python != sys.executable:
            # In a virtualenv Jupyter prefers the env's own `python3` kernelspec to ours.
            env["JUPYTER_PREFER_ENV_PATH"] = "0"
        for name, value in self.extra_env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def _spawn(self) -> None:
        dirs = self._dirs()
        if self._log is None:
            self._log = self.log_path.open("ab")
        app = "JupyterNotebookApp" if self.app == "notebook" else "LabApp"
        command = [
            self.python,
            "-m",
            "notebook" if self.app == "notebook" else "jupyterlab",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            "--ServerApp.open_browser=False",
            f"--ServerApp.root_dir={self.root}",
            f"--IdentityProvider.token={self.token}",
            "--ServerApp.password=",
            f"--{app}.user_settings_dir={dirs['settings']}",
            f"--{app}.workspaces_dir={dirs['workspaces']}",
        ]
        if self.app == "lab":
            command += [
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class="
                "jupyterlab.handlers.announcements.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly",  # the default asks PyPI for listings
            ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--ServerApp.allow_root=True")  # CI containers run as root
        self.process = subprocess.Popen(
            command,
            cwd=self.root,
            env=self._environment(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, kernels included
        )

    def _wait_ready(self) -> bool:
        """Poll `GET /api` until it answers; False when the process died first."""
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return False
                try:
                    response = client.get(self.url("api"))
                    if response.status_code == 200 and "version" in response.json():
                        return True
                except (httpx.HTTPError, ValueError):
                    pass
                time.sleep(0.2)  # polling interval, not a wait for a condition
        raise RuntimeError(
            f"JupyterLab did not answer /api in {self.startup_timeout}s; its log:\n"
            + self.log_tail()
        )
