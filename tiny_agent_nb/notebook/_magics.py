"""`%%agent` and `%agent ...`: glue between IPython and `NotebookAgent`."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from IPython.core.error import StdinNotImplementedError, UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from ..provider import DEMO_LABEL, DEMO_PROVIDER
from ..render import cell_text, money
from ..timeline import short_arguments
from ._approval import ask_approval
from ._config import TinyAgent
from ._display import CellDisplay
from ._paths import resolve_session_path
from ._runtime import NotebookAgent, NotebookError
from ._widget import TimelineWidget

COMMANDS = ("status", "timeline", "usage", "resume", "new", "session", "help")
_NAME = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")


def fill_prompt(text: str, namespace: Mapping[str, Any]) -> str:
    """`{name}` → the value of `name` in the user namespace; anything else is left as is
    (JSON, code and `{{escaped}}` braces survive)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        return str(namespace[name]) if name in namespace else match.group(0)

    return _NAME.sub(value, text).replace("{{", "{").replace("}}", "}")


@magics_class
class AgentMagics(Magics):
    def __init__(self, shell: Any, agent: NotebookAgent) -> None:
        super().__init__(shell)
        self.runtime = agent
        self.widgets: list[TimelineWidget] = []

    @magic_arguments()
    @argument("command", nargs="*", help=f"line form: one of {', '.join(COMMANDS)}")
    @argument("--model", "-m", help="model id for this cell (default: TinyAgent.model)")
    @argument("--max-steps", type=int, help="model steps before stopping (stepLimit)")
    @argument("--budget", type=float, metavar="USD", help="USD this run may spend (budgetLimit)")
    @argument("--tools", help="comma-separated tools for this cell, e.g. read_file,grep")
    @argument("--approve", choices=["auto", "ask", "deny"], help="tools that change things")
    @line_cell_magic
    def agent(self, line: str, cell: str | None = None) -> None:
        """Run a prompt through the durable agent loop, or manage the session.

        Cell form (the body is the prompt; `{name}` is filled from your variables):

            %%agent [--model M] [--max-steps N] [--tools a,b] [--approve auto|ask|deny]
                    [--budget USD]
            Find why tests/test_parse.py fails and fix it.

        Line form:

            %agent status        the session file, runs, open/interrupted work, cost
            %agent timeline      live timeline widget (runs, attempts, tools, usage)
            %agent usage         tokens and cost, per run and in total
            %agent resume        continue the latest interrupted or aborted run
            %agent new           keep this conversation in NAME.agent.<n>.jsonl, start afresh
            %agent session [P]   show, or switch to, the session file P
            %agent help          this text

        Every step is written to the session file before it takes effect; after a kernel
        restart, `%load_ext tiny_agent_nb` reports what was interrupted.
        """
        try:
            args = parse_argstring(self.agent, line)
        except UsageError:
            raise
        except SystemExit:  # argparse's exit on a bad choice
            raise UsageError(f"bad arguments: {line!r}; see %agent help") from None
        try:
            if cell is not None:
                if args.command:
                    raise UsageError(
                        f"%%agent takes options only, not {' '.join(args.command)!r}; "
                        "the prompt is the cell body"
                    )
                self._run(cell, args)
            else:
                self._command(args)
        except NotebookError as exc:
            print(exc)

    # ------------------------------------------------------------------ cell
    def _run(self, cell: str, args: Any) -> None:
        assert self.shell is not None
        prompt = fill_prompt(cell, self.shell.user_ns).strip()
        if not prompt:
            raise UsageError("%%agent needs a prompt in the cell body")
        if args.max_steps is not None and args.max_steps < 1:
            raise UsageError("--max-steps must be at least 1")
        if args.budget is not None and not 0 < args.budget < float("inf"):
            raise UsageError("--budget must be a positive number of USD, e.g. --budget 0.50")
        tools = [t.strip() for t in args.tools.split(",") if t.strip()] if args.tools else None
        self.runtime.check_ready()
        self.runtime.require_store()
        view = CellDisplay(rich=self._rich())
        if self.runtime.config.demo_mode() and args.model is None:
            print(f"[{DEMO_LABEL}]")
        try:
            result = self.runtime.run(
                prompt,
                observer=view,
                ask=self._ask,
                model=args.model,
                max_steps=args.max_steps,
                budget=args.budget,
                tools=tools,
                approve=args.approve,
            )
        except KeyboardInterrupt:
            view.finish(None)
            print("⏹ Interrupted. The abort is recorded; `%agent resume` continues the run.")
            return
        finally:
            self._refresh_widgets()
        view.finish(result.text if result.outcome == "completed" else None)
        detail = cell_text(result.detail or "")
        if result.outcome == "failed":
            print(f"✗ The run failed: {detail}")
        elif result.outcome == "stepLimit":
            print(f"⏸ {detail}. `%agent resume` is not needed: send a new prompt to go on.")
        elif result.outcome == "budgetLimit":
            print(f"⏸ {detail}.")

    def _ask(self, tool: str, arguments: object) -> bool:
        try:
            return ask_approval(tool, arguments if isinstance(arguments, Mapping) else {}, input)
        except (StdinNotImplementedError, EOFError):
            print(f"(no way to ask here: {cell_text(tool)} was not allowed)")
            return False

    # ------------------------------------------------------------------ line
    def _command(self, args: Any) -> None:
        if not args.command:
            raise UsageError(f"%agent needs a command: {', '.join(COMMANDS)} (see %agent help)")
        command, *rest = args.command
        if command not in COMMANDS:
            raise UsageError(f"unknown command {command!r}; use one of {', '.join(COMMANDS)}")
        if rest and command != "session":
            raise UsageError(f"%agent {command} takes no argument")
        if len(rest) > 1:
            raise UsageError("%agent session takes one PATH")
        getattr(self, f"_cmd_{command}")(*rest)

    def _cmd_help(self) -> None:
        # magic_arguments appends its usage to the docstring after a reST "::" marker.
        doc = AgentMagics.agent.__doc__ or ""
        print("\n".join(line for line in doc.splitlines() if line.strip() != "::"))

    def _cmd_status(self) -> None:
        store = self.runtime.require_store()
        state = store.load()
        open_op = state.open_operation
        latest = list(state.operations.values())[-1] if state.operations else None
        header = state.header
        print(f"session  {cell_text(str(store.path))}")
        model = f"{cell_text(header.provider)} / {cell_text(header.model)}"
        print(f"model    {model} (this session's header)")
        print(f"runs     {len(state.operations)}; facts {state.last_seq}")
        if open_op is not None:
            print(f"running  {open_op.id}")
        elif latest is not None:
            print(
                f"latest   {latest.kind} {latest.status}"
                + (f" — {cell_text(latest.detail)}" if latest.detail else "")
            )
        interrupted = [i for i in state.tool_intents.values() if i.status == "interrupted"]
        for intent in interrupted[-5:]:
            summary = cell_text(short_arguments(intent.arguments))
            print(f"  ⚠ {cell_text(intent.tool.name)} {summary} — interrupted")
        print(f"cost     {money(state.totals.known_cost, state.totals.unpriced)}")

    def _cmd_timeline(self) -> None:
        store = self.runtime.require_store()
        state = store.load()
        providers = {a.provider for a in state.attempts.values()} or {state.header.provider}
        widget = TimelineWidget(store.load, scripted=DEMO_PROVIDER in providers)
        store.subscribe(widget.on_commit)
        self.widgets.append(widget)
        display(widget)

    def _cmd_usage(self) -> None:
        state = self.runtime.require_store().load()
        t = state.totals
        for op_id, run in state.usage_by_operation().items():
            op = state.operations[op_id]
            cost = money(run.known_cost) if run.priced else "cost unknown"
            print(
                f"{op.kind:<6} {op.status:<11} {run.input_tokens:>8} in "
                f"{run.output_tokens:>7} out  {cost}"
                + (f" — {cell_text(op.detail)}" if op.status == "budgetLimit" and op.detail else "")
            )
        print(
            f"total  {t.input_tokens} in, {t.output_tokens} out, {t.reasoning_tokens} reasoning, "
            f"{t.cached_input_tokens} cached · {money(t.known_cost, t.unpriced)}"
        )

    def _cmd_resume(self) -> None:
        self.runtime.check_ready()
        view = CellDisplay(rich=self._rich())
        try:
            result = self.runtime.resume(observer=view, ask=self._ask)
        except KeyboardInterrupt:
            view.finish(None)
            print("⏹ Interrupted. The abort is recorded; `%agent resume` continues the run.")
            return
        finally:
            self._refresh_widgets()
        view.finish(result.text if result.outcome == "completed" else None)
        if result.outcome != "completed":
            print(
                f"Resume ended: {result.outcome}"
                + (f" — {cell_text(result.detail)}" if result.detail else "")
            )

    def _cmd_new(self) -> None:
        archived, report = self.runtime.new()
        print(f"Kept the previous conversation as {cell_text(archived.name)}.")
        print(report.text())

    def _cmd_session(self, path: str | None = None) -> None:
        if path is None:
            store = self.runtime.require_store()
            print(cell_text(str(store.path)))
            return
        location = resolve_session_path(explicit=path, environ={}, user_ns={}, cwd=Path.cwd())
        print(self.runtime.open(location).text())

    # ------------------------------------------------------------------ helpers
    def _rich(self) -> bool:
        return type(self.shell).__name__ == "ZMQInteractiveShell"

    def _refresh_widgets(self) -> None:
        for widget in self.widgets:
            widget.refresh()


def load(shell: Any) -> AgentMagics:
    config = TinyAgent(parent=shell)
    if config not in shell.configurables:
        shell.configurables.append(config)
    agent = NotebookAgent(config, shell.user_ns)
    magics = AgentMagics(shell, agent)
    shell.register_magics(magics)
    location = resolve_session_path(
        explicit=config.session_path, environ=os.environ, user_ns=shell.user_ns, cwd=Path.cwd()
    )
    try:
        print(agent.open(location).text())
    except NotebookError as exc:
        print(exc)
    return magics


def unload(shell: Any, magics: AgentMagics) -> None:
    magics.runtime.close()
    if magics.runtime.config in shell.configurables:
        shell.configurables.remove(magics.runtime.config)
