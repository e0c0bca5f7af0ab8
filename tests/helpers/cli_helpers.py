"""One way to call the command line in the CLI tests.

`cli` runs `tiny-agent-nb ARGV` in this process (what most tests use: fast, and it checks
that the FILE it names is left exactly as it was); `cli_process` runs it as a real
process, for what only a process shows (its exit status, another working directory).
`cli_on_tty` runs it on a terminal.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.cli import main
from tiny_agent_nb.session import SessionStore

from helpers.scenario import Run

COMMAND = [sys.executable, "-m", "tiny_agent_nb"]
FIXTURES = Path(__file__).resolve().parents[2] / "schemas" / "session" / "fixtures"
TORN = b'{"kind":"entry","seq":9,"id":"0190'


@contextmanager
def untouched(path: Path) -> Iterator[None]:
    """Fails unless the file's bytes and mtime are the same after the block."""
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    yield
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`tiny-agent-nb ARGV` in this process: (exit status, stdout, stderr).

    No command writes its FILE (ARGV[1]): a regular file is left as it was (bytes and
    mtime), a missing one is not created. Bad usage, --help and --version exit through
    argparse's SystemExit: its code is the status."""
    file = Path(argv[1]) if len(argv) > 1 and not argv[1].startswith("-") else None
    existed = file is not None and os.path.lexists(file)
    with ExitStack() as stack:
        if file is not None and file.is_file():
            stack.enter_context(untouched(file))
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    if file is not None and not existed:
        assert not os.path.lexists(file), f"{argv[0]} must never create {file}"
    out, err = capsys.readouterr()
    return code, out, err


def cli_process(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tiny_agent_nb ARGV` in a fresh interpreter, its output captured."""
    return subprocess.run(
        [*COMMAND, *argv],
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
        timeout=60,
        cwd=cwd,
    )


def cli_on_tty(*argv: str, env: dict[str, str]) -> tuple[int, str]:
    """`python -m tiny_agent_nb ARGV` with stdout on a pseudo-terminal."""
    master, slave = pty.openpty()
    with subprocess.Popen(
        [*COMMAND, *argv],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.DEVNULL,
        env=env,
    ) as process:
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        code = process.wait(timeout=60)
    os.close(master)
    return code, b"".join(chunks).decode("utf-8")


def tty_env(**changes: str | None) -> dict[str, str]:
    """This environment on a colour terminal (no NO_COLOR), with `changes` applied."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    env["TERM"] = "xterm-256color"
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def replace_line(path: Path, lineno: int, new: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[lineno - 1] = new
    path.write_bytes(b"\n".join(lines))


def start_and_finish(store: SessionStore, prompt: str, outcome: str = "completed") -> Run:
    """The smallest run: user+runStarted, then operationFinished (no attempt)."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start(prompt))
    store.commit(run.finish(outcome))
    return run


def session_fixtures() -> list[Path]:
    """The conformance fixtures (schemas/session/fixtures/*.jsonl)."""
    return sorted(FIXTURES.glob("*.jsonl"))


def _expected(fixture: Path) -> dict[str, Any]:
    expected: dict[str, Any] = json.loads(fixture.with_suffix(".expected.json").read_text("utf-8"))
    return expected


def corrupt_fixtures(*, header: bool = False) -> list[Path]:
    """Fixtures whose expected load fails on a damaged line (`header`: on line 1)."""
    found = []
    for fixture in session_fixtures():
        error = _expected(fixture).get("error", {})
        if error.get("type") == "SessionCorruptError" and (error["line"] == 1) == header:
            found.append(fixture)
    return found


def not_a_session_fixtures() -> list[Path]:
    return [
        p
        for p in session_fixtures()
        if '"NotASessionError"' in p.with_suffix(".expected.json").read_text("utf-8")
    ]
