"""Agent child of tests/test_agent_crash.py: one agent process, killed or not by the parent.

    python agent_child.py MODE --base-url URL --workspace DIR --session FILE
                          [--prompt TEXT] [--approval auto|ask]

It wires `AgentLoop` the way tests/test_agent_loop.py does: a real `Provider` talking to
the parent's loopback OpenAI server, the built-in tools acting on the workspace (its
realpath is the environment identity), the session file given. MODE is

- `run`: open the session (creating it if missing) and run the prompt;
- `resume`: a new process after a crash: `loop.recover()`, then `loop.resume()`;
- `restart`: the same calls once more, to show that a second restart changes nothing;
- `compact`: `%agent compact`'s operation (`loop.compact()`) on the existing session.

With `--approval ask` the approval callback prints `asking <tool>` and blocks reading one
line from stdin (`yes` allows the call): the parent kills the child while it waits, i.e.
after the assistant entry and before any toolStarted.

Protocol on stdout, one line each: `ready <pid>` once the loop is wired, `asking <tool>`,
and finally `report <json>`: what `recover` returned (operation, call ids replayed and
interrupted, attempts failed) and what `run`/`resume` returned (or the AgentError).

The crash tests fork this module from a multiprocessing forkserver that has already
imported the package and this module (a fresh interpreter spends ~0.3 s importing pydantic
and httpx, too much for hundreds of processes); `forked` is that entry point, with the same
lines sent on a pipe instead of stdout (and the approval answer read from it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

from tiny_agent_nb.agent import AgentError, AgentLoop, LoopConfig, RecoveryReport, RunResult
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import HeaderInit, SessionStore
from tiny_agent_nb.tools import NOTEBOOK_TOOLS, ToolContext, builtin_registry

MODEL = "test/model"
BUILTIN_NAMES = builtin_registry().names
# The process that imported this module: the forkserver, for the children it forks
# (tests/conftest.py preloads it), else the child itself.
IMPORTED_IN = os.getpid()
# The verifying TLS context httpx makes for each client of its own, made once here: in
# the forkserver, before its hundreds of children. Loading the CA bundle was a third of
# an agent child's CPU, for a loopback server it never reaches over TLS.
TLS = httpx.create_ssl_context()

Emit = Callable[[str], None]
Ask = Callable[[str, Mapping[str, Any]], bool]


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["run", "resume", "restart", "compact"])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--session", type=Path, required=True)
    parser.add_argument("--prompt", default="Work through the plan.")
    parser.add_argument("--approval", choices=["auto", "ask"], default="auto")
    parser.add_argument("--budget", type=float, default=None, help="USD per run")
    parser.add_argument("--context-window", type=int, default=None, help="tokens")
    parser.add_argument("--keep-tail-tokens", type=int, default=8000)
    return parser.parse_args(argv)


def recovery_json(report: RecoveryReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {
        "operationId": report.operation_id,
        "replayed": [i.tool_call_id for i in report.replayed],
        "interrupted": [i.tool_call_id for i in report.interrupted],
        "failedAttempts": report.failed_attempts,
    }


def result_json(result: RunResult) -> dict[str, Any]:
    return {
        "operationId": result.operation_id,
        "outcome": result.outcome,
        "text": result.text,
        "detail": result.detail,
    }


def drive(args: argparse.Namespace, emit: Emit, ask: Ask) -> dict[str, Any]:
    workspace = Path(os.path.realpath(args.workspace))
    provider_config = ProviderConfig(model=MODEL, base_url=args.base_url)
    create = (
        HeaderInit(
            cwd=str(workspace),
            provider="openrouter",
            model=MODEL,
            environment_identity=str(workspace),
        )
        if args.mode == "run"
        else None
    )
    report: dict[str, Any] = {"mode": args.mode, "pid": os.getpid()}
    transport = httpx.HTTPTransport(verify=TLS)
    with (
        Provider(provider_config, transport=transport) as provider,
        SessionStore.open(args.session, create) as store,
    ):
        loop = AgentLoop(
            store,
            provider,
            # the tools a run with no notebook is offered (notebook/_loops.py)
            builtin_registry().subset(n for n in BUILTIN_NAMES if n not in NOTEBOOK_TOOLS),
            ToolContext(workspace=workspace, namespace={}),
            LoopConfig(
                provider_config,
                approval=args.approval,
                budget=args.budget,
                context_window=args.context_window,
                keep_tail_tokens=args.keep_tail_tokens,
            ),
            ask=ask,
        )
        try:
            emit(f"ready {os.getpid()}")
            if args.mode == "run":
                report["run"] = result_json(loop.run(args.prompt))
                return report
            if args.mode == "compact":
                report["compact"] = result_json(loop.compact())
                return report
            report["recovered"] = recovery_json(loop.recover())
            try:
                report["resume"] = result_json(loop.resume())
            except AgentError as exc:
                report["resume"] = {"error": str(exc)}
            return report
        finally:
            loop.close()


def stdin_ask(emit: Emit) -> Ask:
    def ask(tool: str, arguments: Mapping[str, Any]) -> bool:
        emit(f"asking {tool}")
        return sys.stdin.readline().strip() == "yes"

    return ask


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    report = drive(args, emit, stdin_ask(emit))
    emit("report " + json.dumps(report))
    return 0


def forked(argv: Sequence[str], conn: Connection, asks: bool = False) -> None:
    """Entry point in a forkserver child: the same protocol, on `conn`. With `asks` (a
    duplex `conn`), `--approval ask` reads its answer from `conn`; else it never asks."""

    def emit(line: str) -> None:
        conn.send_bytes(line.encode())

    def ask(tool: str, arguments: Mapping[str, Any]) -> bool:
        if not asks:
            return False
        emit(f"asking {tool}")
        return conn.recv_bytes() == b"yes"

    try:
        report = drive(parse(argv), emit, ask)
    except Exception:
        emit("error " + traceback.format_exc())  # the parent shows it in its failure
        raise
    emit("report " + json.dumps(report))


def preloaded(conn: Connection) -> None:
    """In a forkserver child: whether this module and children/commit_loop.py were
    imported before the fork (by the forkserver), as sent on `conn`."""
    before = "children.commit_loop" in sys.modules
    conn.send_bytes(json.dumps([os.getpid() != IMPORTED_IN, before]).encode())


if __name__ == "__main__":
    raise SystemExit(main())
