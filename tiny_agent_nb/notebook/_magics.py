"""`%%agent` and `%agent ...`: glue between IPython and `NotebookRuntime`."""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Any, get_args

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, kwds, magic_arguments, parse_argstring
from IPython.display import display, publish_display_data

from ..agent import LoopObserver, RunResult
from ..render import cell_text
from ..session import Approval
from ..timeline import compactions, usage_lines
from ._cell_runs import CellRuns
from ._commands import (
    OPTIONS,
    RUN_OPTIONS,
    SUBCOMMANDS,
    PromptError,
    check_command,
    command_help,
    fill_prompt,
    magic_help,
    run_options,
)
from ._display import CellDisplay
from ._links import link_bundle, links_here, resolve_session_path
from ._loops import AskFn, continuing
from ._opening import NotebookError
from ._provider import DEMO_CELL_LABEL
from ._report import OpenReport, forget_window, outcome_line, stated, status_text, summary_text
from ._rerun import CellReplays
from ._rewinding import rewind_here
from ._runtime import NotebookRuntime
from ._timeline_view import TimelineView, superseding_bundle
from ._user_cells import cell_record

log = logging.getLogger(__name__)

MCP_INTERRUPTED = "■ Interrupted while the MCP servers were starting; nothing was sent or recorded."


def _option_help(option: str) -> str:
    return OPTIONS[option][1].replace("%", "%%")  # argparse formats help with %


@magics_class
class AgentMagics(Magics):
    def __init__(self, shell: Any, runtime: NotebookRuntime) -> None:
        super().__init__(shell)
        self.runtime = runtime
        self.views: list[TimelineView] = []
        self.runs = CellRuns(
            shell,
            rich=self._rich(),
            stopped_run=runtime.stopped_run,
            allowed=runtime.allowed_tools,
        )
        # A kernel restart or shutdown from the menu interrupts a running cell first:
        # the run's abort says which it was, not "interrupted by the user".
        runtime.stopped_by = self.runs.stopped_by
        self.replays = CellReplays(runtime, self.runs, self._resume_clicked)

    @magic_arguments()
    @argument("command", nargs="*", help=f"line form: one of {', '.join(SUBCOMMANDS)}")
    @argument("--model", "-m", help=_option_help("model"))
    @argument("--max-steps", type=int, help=_option_help("max_steps"))
    @argument("--budget", type=float, metavar="USD", help=_option_help("budget"))
    @argument("--tools", help=_option_help("tools"))
    @argument("--approve", choices=get_args(Approval), help=_option_help("approve"))
    @argument("--demo", action="store_true", help=_option_help("demo"))
    @argument("--rerun", action="store_true", help=_option_help("rerun"))
    @argument("--yes", action="store_true", help=_option_help("yes"))
    @argument("--force", action="store_true", help=_option_help("force"))
    @argument("--undo", action="store_true", help=_option_help("undo"))
    # `--help` as every command line has it; kept out of the usage, which `%agent help` is.
    @argument("-h", "--help", action="store_true", help=argparse.SUPPRESS)
    @line_cell_magic
    @kwds(description=magic_help())  # `%%agent?`: @magic_arguments adds the options
    def agent(self, line: str, cell: str | None = None) -> None:
        try:
            args = parse_argstring(self.agent, line)
        except SystemExit:  # argparse's exit on a bad choice
            raise UsageError(f"bad arguments: {line!r}; see %agent help") from None
        except ValueError as exc:  # the splitter's "No closing quotation"
            raise UsageError(f"bad arguments: {line!r} ({exc}); see %agent help") from None
        if args.help:  # nothing else of the line or the cell is done
            named = args.command[0] if cell is None and args.command else None
            self._cmd_help(named if named in SUBCOMMANDS else None)
            return
        try:
            if cell is not None:
                if args.command:
                    raise UsageError(
                        f"%%agent takes options only, not {' '.join(args.command)!r}; "
                        "the prompt is the cell body"
                    )
                if args.yes or args.force or args.undo:
                    raise UsageError("--yes, --force and --undo go with %agent rewind")
                self._run(cell, args)
            else:
                self._command(args)
        except NotebookError as exc:
            print(exc)

    # ------------------------------------------------------------------ cell
    def _run(self, cell: str, args: Any) -> None:
        assert self.shell is not None
        try:
            prompt = fill_prompt(cell, self.shell.user_ns).strip()
        except PromptError as exc:
            raise UsageError(str(exc)) from None
        if not prompt:
            raise UsageError("%%agent needs a prompt in the cell body")
        options = run_options(args)
        view = self._view()
        # Before anything that needs a model: a cell run again shows its run (docs/spec.md §12).
        if not args.rerun and self.replays.replay(prompt, options, demo=args.demo, view=view):
            return
        self._ready(args.model, args.demo, "%%agent")
        self._say_model(args.model, args.demo)
        self.link()
        if not self._start_mcp():
            return

        def run(observer: LoopObserver, ask: AskFn) -> RunResult:
            return self.runtime.run(
                prompt,
                observer=observer,
                ask=ask,
                demo=args.demo,
                cell_id=self.replays.cell_id,
                **options,
            )

        result = self.runs.drive(run, self._resume_clicked, view)
        if result is None:
            return
        said = outcome_line(result)
        if said is not None:
            print(said)
        self.runs.offer_resume(self._resume_clicked)

    def _ready(self, model: str | None, demo: bool, command: str) -> None:
        """Refuse, before anything is said or started, a `command` with no model to ask,
        no session to write, or only the demo model for a session a real one worked on."""
        if not demo:
            self.runtime.provider.check_ready(model)
        self.runtime.require_store()
        self.runtime.session_model.refuse_demo(model, demo=demo, command=command)

    def _view(self) -> CellDisplay:
        return CellDisplay(rich=self._rich(), secrets=self.runtime.config.secrets())

    def _say_model(self, model: str | None, demo: bool) -> None:
        """The demo model's label (once per cell: its answer does not repeat it), and a
        line when the model is not the session's last."""
        if self.runtime.session_model.uses_demo(model, demo):
            print(DEMO_CELL_LABEL)
        change = self.runtime.session_model.change_note(model, demo)
        if change is not None:
            print(change)

    def _start_mcp(self) -> bool:
        """Start the MCP servers a run may call; False when Ctrl-C stopped it (nothing of
        the run was committed yet)."""
        try:
            lines = self.runtime.mcp.start()
        except KeyboardInterrupt:
            print(MCP_INTERRUPTED)
            return False
        for line in lines:
            print(line)
        return True

    # ------------------------------------------------------------------ line
    def _command(self, args: Any) -> None:
        command, rest = check_command(args)
        if command.name == "compact":
            self._cmd_compact(" ".join(rest) or None, demo=args.demo)
        elif command.name == "resume":
            self._cmd_resume(run_options(args), demo=args.demo)
        elif command.name == "rewind":
            self._cmd_rewind(rest, yes=args.yes, force=args.force, undo=args.undo)
        else:
            getattr(self, f"_cmd_{command.name.replace('-', '_')}")(*rest)

    def _cmd_help(self, name: str | None = None) -> None:
        if name is not None and name not in SUBCOMMANDS:
            raise UsageError(f"unknown command {name!r}; use one of {', '.join(SUBCOMMANDS)}")
        print(command_help(name) if name is not None else AgentMagics.agent.__doc__ or "")

    def _cmd_status(self) -> None:
        print(status_text(self.runtime))

    def _cmd_forget_window(self) -> None:
        print(forget_window(self.runtime.provider, self.runtime.require_store()))

    def _cmd_summary(self) -> None:
        state, _ = self.runtime.read_state()
        print(summary_text(state))

    def _cmd_timeline(self) -> None:
        live = self._rich()
        rewind = None
        if live:  # a Rewind button per run, where a person clicks
            from ._rewind_control import RewindControl  # noqa: PLC0415 (imports anywidget)

            rewind = RewindControl.where_available(
                self.shell,
                self.runtime,
                lambda run: self._cmd_rewind([str(run)], yes=False, force=False, undo=False),
            )
        view = TimelineView(self.runtime, live=live, rewind=rewind)
        view.show()
        if live:  # a terminal would print the whole timeline again on each update
            self.views = [v for v in self.views if not v.closed] + [view]

    def _cmd_usage(self) -> None:
        # The CLI's `usage` table: one renderer says a session's usage everywhere.
        state, read_only = self.runtime.read_state()
        lines = usage_lines(state)
        text = "\n".join([f"({read_only})", *lines] if read_only else lines)
        print(cell_text(text, keep_lines=True))

    def _cmd_resume(self, options: dict[str, Any], *, demo: bool = False) -> None:
        self._ready(options["model"], demo, "%agent resume")
        options, demo = continuing(options, demo, self.runtime.stopped_run())
        self._say_model(options["model"], demo)
        if not self._start_mcp():
            return
        result = self.runs.drive(
            lambda observer, ask: self.runtime.resume(
                observer=observer, ask=ask, demo=demo, **options
            ),
            self._resume_clicked,
            self._view(),
        )
        if result is None or result.outcome == "completed":
            return
        said = stated(result)
        print(f"Resume ended: {result.outcome}" + (f" — {said}" if said else ""))
        self.runs.offer_resume(self._resume_clicked)

    def _resume_clicked(self) -> None:
        """A Resume button's click, on the main shell: `%agent resume`, said as it says."""
        try:
            self._cmd_resume(dict.fromkeys(RUN_OPTIONS))
        except NotebookError as exc:
            print(exc)

    def _cmd_compact(self, instructions: str | None, *, demo: bool = False) -> None:
        self._ready(None, demo, "%agent compact")
        # After a stopped run: its model, and its budget, which the compaction spends.
        options, demo = continuing({}, demo, self.runtime.stopped_run())
        view = self._view()
        before = len(compactions(self.runtime.read_state()[0]))
        try:
            result = self.runtime.compact(instructions, observer=view, demo=demo, **options)
        except KeyboardInterrupt:
            # As the file says: the interrupt may come once the compaction is committed.
            done = compactions(self.runtime.read_state()[0])[before:]
            print(
                f"■ Interrupted once the compaction was committed ({done[-1].words}): the "
                "conversation goes on from its summary. The stop is recorded."
                if done
                else "■ Interrupted. Nothing was compacted; the conversation is as it was."
            )
            return
        if result.outcome != "completed":
            said = stated(result)  # the statement, then the notebook's advice
            print(f"Compaction ended: {result.outcome}" + (f" — {said}" if said else ""))

    def _cmd_rewind(self, words: list[str], *, yes: bool, force: bool, undo: bool) -> None:
        rewind_here(
            self.shell,
            self.runtime.require_store(),
            words,
            yes=yes,
            force=force,
            undo=undo,
            rich=self._rich(),
            before=self.runs.withdraw_offers,  # a Resume button may name a run rewound
            notebook=self.runtime.loops.notebook,
            file_store=self.runtime.config.file_store,
        )

    def _cmd_new(self) -> None:
        self.runs.withdraw_offers()
        archived, report = self.runtime.new()
        print(f"Kept the previous conversation as {cell_text(archived.name)}.")
        self.show_report(report)

    def _cmd_fork(self, run: str | None = None) -> None:
        if run is not None and not (run.isascii() and run.isdigit() and int(run) > 0):
            raise UsageError(
                f"%agent fork RUN: a run's number as the timeline shows it, not {run!r}"
            )
        through = int(run) if run is not None else None
        kept, report = self.runtime.fork(through)
        self.runs.withdraw_offers()  # the kept conversation's: this notebook goes on in the fork
        print(
            f"Kept the whole conversation as {cell_text(kept.name)}, unchanged. This notebook "
            f"goes on in a fork of it through {f'run {through}' if through else 'its last run'}; "
            "no file in the workspace was changed."
        )
        self.show_report(report)

    def _cmd_mcp(self) -> None:
        try:
            lines = self.runtime.mcp.report()
        except KeyboardInterrupt:
            print("■ Interrupted while the MCP servers were starting.")
            return
        print("\n".join(lines))

    def _cmd_session(self, path: str | None = None) -> None:
        if path is None:
            read_only = self.runtime.read_only if self.runtime.store is None else None
            if read_only is None:
                self.runtime.require_store()  # no session: says why
            shown = cell_text(str(self.runtime.session_path()))
            print(shown + (f" ({read_only})" if read_only else ""))
            return
        assert self.shell is not None
        location = resolve_session_path(
            explicit=path, environ=os.environ, user_ns=self.shell.user_ns, cwd=Path.cwd()
        )
        self.runs.withdraw_offers()
        self.show_report(self.runtime.open(location))

    # ------------------------------------------------------------------ helpers
    def show_report(self, report: OpenReport) -> None:
        """What opening a session did, and the notebook's link to it. When it settled a run
        a stopped kernel left open, a Jupyter frontend also gets the stylesheet that marks
        that kernel's timelines, left showing the run open, superseded, and a Resume button."""
        print(report.text())
        if report.recovery is not None and self._rich():
            display(superseding_bundle(report.state.header.id), raw=True)
        self.runs.offer_resume(self._resume_clicked)
        self.link()

    def _rich(self) -> bool:
        return type(self.shell).__name__ == "ZMQInteractiveShell"

    def record_cell(self, result: Any) -> None:
        """After every cell (IPython's post_run_cell): keep it for the next prompt, unless
        it is an agent cell. Never raises: the cell has run."""
        try:
            cell = cell_record(result, self._cell_label)
            if cell is not None:
                self.runtime.user_cells.record(cell)
        except Exception:
            log.exception("the cell could not be kept as context")

    def _cell_label(self, filename: str) -> str | None:
        """`In [3]` for the file name IPython compiled cell 3 under, else None."""
        compiler = getattr(self.shell, "compile", None)
        named = compiler.format_code_name(filename) if compiler is not None else None
        if not named:
            return None
        return str(named[1]).replace("In[", "In [", 1)

    def link(self) -> None:
        """Leave, in this cell's output, the notebook's link to its session (docs/spec.md
        §10): a display no frontend renders, saved and copied with the notebook."""
        store, location = self.runtime.store, self.runtime.location
        if store is None or location is None or not links_here(location) or not self._rich():
            return
        publish_display_data(link_bundle(store.header.id, store.path, time.time_ns() // 10**6))

    def refresh_views(self, *_: object) -> None:
        """After every cell (IPython's post_run_cell): the views draw what the cell
        changed, and a read-only view what the writing kernel committed meanwhile. Never
        raises: the cell's own output is already shown."""
        for view in self.views:
            try:
                view.refresh()
            except Exception:
                log.exception("timeline display failed to refresh")
        self.views = [v for v in self.views if not v.closed]


# magic_arguments puts its usage, under a reST "::" marker, at the top of the docstring,
# which `%%agent?` and `%agent help` show as they are: the marker means nothing there.
AgentMagics.agent.__doc__ = (AgentMagics.agent.__doc__ or "").removeprefix("::\n\n  ")
