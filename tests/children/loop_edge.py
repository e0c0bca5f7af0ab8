"""Child of tests/test_agent_crash.py: an agent process at the edge of what it can record.

    python loop_edge.py full-disk SESSION WORKSPACE
    python loop_edge.py notebook-full-disk SESSION WORKSPACE BASE_URL
    python loop_edge.py open-full-disk SESSION WORKSPACE
    python loop_edge.py recover SESSION WORKSPACE

`full-disk`: a run whose model (scripted here) calls the python tool with code that caps
the file size of this process (RLIMIT_FSIZE, SIGXFSZ ignored) at the session file's
current size: the disk is full from then on, so the tool's result cannot be committed,
and neither can the failure that closes the run. Prints one JSON object: the error the
run raised, its message and the chain of causes.

`notebook-full-disk`: the same run as a notebook cell (`NotebookRuntime.run`), its model
on the parent's loopback server: prints the one NotebookError the cell shows.

`open-full-disk`: a notebook opening that session, its recovery refused by the disk
as well: prints the NotebookError it got, and whether the session was left open.

`recover`: a new process recovering the session. The registry has one more safeRead
tool, `waiting_read`, whose replay prints `replaying` and then waits until the process
is interrupted (the parent sends a real SIGINT). Prints `report <json>` when recovery
returns, or `interrupted` when the KeyboardInterrupt came out of it.

`notebook-recover`: the same through the notebook's loading (`NotebookRuntime.open`, what
`%load_ext` runs), with `waiting_read` added to its tools; prints the report it shows.
"""

from __future__ import annotations

import json
import resource
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from tiny_agent_nb.agent import AgentLoop, LoopConfig, LoopObserver
from tiny_agent_nb.notebook import NotebookError, NotebookRuntime, TinyAgent, _loops
from tiny_agent_nb.notebook._links import SessionLocation
from tiny_agent_nb.provider import Completion, ProviderConfig, StreamEvent, messages
from tiny_agent_nb.session import AssistantMessage, HeaderInit, SessionStore, ToolCall
from tiny_agent_nb.tools import (
    Tool,
    ToolArguments,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolSchema,
    builtin_registry,
)

FILL_THE_DISK = """\
import os, resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
size = os.path.getsize({session!r})
resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
print("the disk is full now")
"""


class WaitingRead(Tool):
    name = "waiting_read"
    description = "A read that takes until the user interrupts it."
    replay_policy: ClassVar = "safeRead"

    class Arguments(ToolArguments):
        pass

    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        print("replaying", flush=True)
        while True:
            time.sleep(0.01)


def with_waiting_read() -> ToolRegistry:
    builtin = builtin_registry()
    return ToolRegistry([*(t for n in builtin.names if (t := builtin.get(n))), WaitingRead()])


class ScriptedModel:
    """Calls the python tool once with `code`; never asked a second time here."""

    def __init__(self, code: str) -> None:
        self.code = code

    def complete(
        self,
        context: messages.Context,
        tools: Sequence[ToolSchema],
        *,
        on_event: Callable[[StreamEvent], None] | None = None,
    ) -> Completion:
        call = ToolCall(id="p1", name="python", arguments={"code": self.code})
        message = AssistantMessage(
            role="assistant",
            content=None,
            reasoning=None,
            refusal=None,
            toolCalls=(call,),
            finishReason="tool_calls",
        )
        return Completion(message=message, usage=None)


def loop(store: SessionStore, workspace: Path, provider: Any, tools: ToolRegistry) -> AgentLoop:
    config = LoopConfig(ProviderConfig("test/model"), approval="auto")
    return AgentLoop(store, provider, tools, ToolContext(workspace=workspace), config)


def causes(exc: BaseException | None) -> list[str]:
    chain = []
    while exc is not None:
        chain.append(type(exc).__name__)
        exc = exc.__cause__ or exc.__context__
    return chain


def main() -> None:
    # SIGINT delivered and raising KeyboardInterrupt, as in a kernel, whatever this
    # process inherited: a test run started in the background leaves SIGINT ignored in
    # every process it starts (Python then installs no handler of its own), and a
    # blocked signal stays blocked across exec; either way the parent's interrupt would
    # be lost and the test would wait out its timeout (seen once in a CI run).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    mode, session, workspace = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]).resolve()
    if mode == "full-disk":
        init = HeaderInit(
            cwd=str(workspace),
            provider="openrouter",
            model="test/model",
            environment_identity=str(workspace),
        )
        with SessionStore.open(session, create=init) as store:
            model = ScriptedModel(FILL_THE_DISK.format(session=str(session)))
            agent = loop(store, workspace, model, builtin_registry())
            try:
                result = agent.run("fill the disk")
                print(json.dumps({"result": result.outcome}))
            except Exception as exc:
                seen = {"error": type(exc).__name__, "message": str(exc), "causes": causes(exc)}
                print(json.dumps(seen))
        return
    if mode == "notebook-full-disk":
        # A %%agent cell: the model on the parent's loopback server asks for FILL_THE_DISK.
        config = TinyAgent(
            base_url=sys.argv[4], model="test/model", workspace=str(workspace), approve="auto"
        )
        agent = NotebookRuntime(config, {})
        agent.open(SessionLocation(session, "explicit"))
        try:
            agent.run("fill the disk", observer=LoopObserver(), ask=None)
            print(json.dumps({"error": None}))
        except NotebookError as exc:
            print(json.dumps({"error": "NotebookError", "message": str(exc)}))
        return
    if mode == "open-full-disk":
        # A notebook loading the session on a disk that takes no more bytes.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        size = session.stat().st_size
        resource.setrlimit(
            resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1])
        )
        agent = NotebookRuntime(TinyAgent(workspace=str(workspace)), {})
        try:
            agent.open(SessionLocation(session, "explicit"))
            print(json.dumps({"error": None}))
        except NotebookError as exc:
            print(
                json.dumps(
                    {
                        "error": "NotebookError",
                        "message": str(exc),
                        "store": agent.store is not None,
                    }
                )
            )
        return
    if mode == "notebook-recover":
        _loops.builtin_registry = with_waiting_read  # the tools a run may call (KernelServers)
    recover(mode, session, workspace)


def recover(mode: str, session: Path, workspace: Path) -> None:
    """`recover` or `notebook-recover` (for the latter, `_loops.builtin_registry` is
    `with_waiting_read`). tests/test_agent_edges.py calls it in its own process too, for
    a load that has nothing to replay."""
    tools = with_waiting_read()
    if mode == "notebook-recover":
        # The notebook's own loading, with the read that waits among its tools.
        config = TinyAgent(workspace=str(workspace), tools=list(tools.names))
        agent = NotebookRuntime(config, {})
        print(agent.open(SessionLocation(session, "explicit")).text(), flush=True)
        agent.close()
        return
    with SessionStore.open(session) as store:
        agent = loop(store, workspace, ScriptedModel(""), tools)
        try:
            report = agent.recover()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            return
        done = None if report is None else {"operationId": report.operation_id}
        print("report " + json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
