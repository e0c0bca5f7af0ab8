"""The `%agent` subcommands in one registry (as the command line's `Command`): what each
is called, takes and says. `%agent help`, `%%agent?` and each `%agent NAME --help` are
generated from it, the magics dispatch through it (`AgentMagics._cmd_NAME` runs NAME,
its hyphens as underscores),
and tests/test_notebook_commands.py holds the README's `%agent` table to it. Also the
checks of what a line or a cell gives: options, a command's words, the prompt's fields.

A `%%agent` prompt's fields (`fill_prompt`; `%agent help` and the README say the rules):
`{name}`, `{name.attr}`, `{name[key]}` (chained as in `str.format`) become the value's
`str()` when `name` is a notebook variable; `{{name}}` becomes `{name}`, the one escape;
nothing else changes: an unknown name, `${name}`, other braces, and everything inside code
fences and code spans reach the model verbatim. A name that exists but whose attribute or
key does not is an error (`PromptError`), not a silent hole in the prompt.
"""

from __future__ import annotations

import re
import shlex
import string
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from IPython.core.error import UsageError

from .._exceptions import TinyAgentError

WIDTH = 80  # the help's lines, as a terminal and a notebook output show them whole
COLUMN = 21  # where a command's help starts after `%agent NAME ARGUMENTS`


@dataclass(frozen=True)
class Subcommand:
    """One `%agent NAME`: its arguments as the usage shows them, its one-line help
    (the whole help's and the README table's), what follows the name on the line, and which
    of `%%agent`'s options it takes (any other is refused, not ignored)."""

    name: str
    arguments: str
    help: str
    takes: Literal["nothing", "path", "text", "name", "number"] = "nothing"
    options: tuple[str, ...] = ()

    @property
    def usage(self) -> str:
        return " ".join(filter(None, ["%agent", self.name, self.arguments]))


# `%%agent`'s options (the argparse dest, the flag and its help), in the usage's order.
OPTIONS: dict[str, tuple[str, str]] = {
    "model": ("--model", "model id for this cell (default: TinyAgent.model)"),
    "max_steps": ("--max-steps", "model steps before stopping (stepLimit)"),
    "budget": ("--budget", "USD this run may spend (budgetLimit)"),
    "tools": (
        "--tools",
        "comma-separated tools for this cell, e.g. read_file,grep; an MCP server's tools "
        "by name (time__get_current_time) or all of them (time__*)",
    ),
    "approve": (
        "--approve",
        "tools that change things: ask first (ask), run them (auto) or refuse them (deny); "
        "default: TinyAgent.approve, itself ask by default",
    ),
    "rerun": (
        "--rerun",
        "ask the model again, even when this cell's prompt and options are those of a run "
        "the session recorded for it (which is otherwise shown again, docs/spec.md §12)",
    ),
    "demo": (
        "--demo",
        "answer with the offline demo model (also %agent resume/compact), even in a "
        "session a real model worked on",
    ),
    # `%agent rewind`'s own (docs/spec.md §17)
    "yes": ("--yes", "carry the rewind out without asking (for scripts)"),
    "force": ("--force", "restore the files the user or another process changed too"),
    "undo": ("--undo", "rewind to just before the last rewind: undo it"),
}
# What `%agent resume` takes of `%%agent`'s options (None: the run's, `continuing`).
RUN_OPTIONS = ("model", "max_steps", "budget", "tools", "approve")

SUBCOMMANDS: dict[str, Subcommand] = {
    s.name: s
    for s in (
        Subcommand(
            "status",
            "",
            "the session file, the model the next run asks (and the ones its runs used, when "
            "they differ), runs, what is open or interrupted, cost, the context window (and "
            "where it comes from), the start of the summary",
        ),
        Subcommand(
            "timeline",
            "",
            "live timeline (runs, attempts, tools, usage), updated in place: HTML that stays "
            'in the saved notebook, text in a terminal; in Jupyter, a "Rewind to before this '
            'run" button on each run (the saved notebook says the command)',
        ),
        Subcommand("usage", "", "tokens and cost, per run and in total"),
        Subcommand(
            "forget-window",
            "",
            "forget the context window the session learned for the model (from the server's "
            "metadata or its refusal of a request too long), in the session file, so no "
            "kernel takes it again: the next run takes `TinyAgent.context_window`, the "
            "server's metadata, or 32768 tokens",
        ),
        Subcommand(
            "resume",
            "[--budget USD] [--max-steps N] [--demo] [...]",
            "continue the latest run that was interrupted, aborted, or stopped by its budget "
            "or `max_steps` (in this kernel or a new one), with that run's options (approval, "
            "tools, budget, steps, model, not the configuration's); an option of `%%agent` "
            "given here replaces that one only (in Jupyter, the Resume button under a stopped "
            "run does the same, and shows them). A budget still reached stops it again at "
            "once, without asking the model; `--max-steps` counts the resume's own steps",
            options=(*RUN_OPTIONS, "demo"),
        ),
        Subcommand(
            "compact",
            "[INSTRUCTIONS] [--demo]",
            "summarize the conversation so far into a checkpoint (INSTRUCTIONS: what the "
            "summary must also keep); later requests send the summary and the recent turns "
            "instead of everything; after a stopped run, with its model and within its "
            "budget. Runs also compact on their own past `TinyAgent.compact_threshold` of the "
            "context window",
            takes="text",
            options=("demo",),
        ),
        Subcommand(
            "rewind",
            "K | --undo [--yes] [--force]",
            "go back to just before run K (its number in the timeline): the files the "
            "agent wrote or edited since are restored, byte for byte (a file changed since "
            "by you or another process is left as it is, unless --force), and the next "
            "`%%agent` continues the conversation from there. Shows the plan first (with "
            "what cannot be undone: bash, python and MCP calls, cell changes) and changes "
            "nothing until confirmed. Nothing is deleted from the session: `--undo` goes "
            "back",
            takes="text",
            options=("yes", "force", "undo"),
        ),
        Subcommand(
            "summary",
            "",
            "the summary the model is sent in place of the earlier conversation after a "
            "compaction, whole (it "
            "reaches the model as the assistant's own note, not in your voice)",
        ),
        Subcommand(
            "new", "", "keep this conversation as `NAME.agent.<n>.jsonl` and start a new one"
        ),
        Subcommand(
            "fork",
            "[RUN]",
            "go on in a fork of the conversation up to and including run RUN (its number in "
            "the timeline; default: all of it), to try another way: the fork takes the "
            "session's name, the whole conversation is kept unchanged as `NAME.agent.<n>.jsonl` "
            "(`%agent status` lists it); no file in the workspace is changed",
            takes="number",
        ),
        Subcommand(
            "session",
            "[PATH]",
            "show, or switch to, the session file PATH (its directory must exist; quote a "
            "PATH with spaces as in a shell)",
            takes="path",
        ),
        Subcommand(
            "mcp",
            "",
            "the MCP servers (TinyAgent.mcp_servers): state, version, the tools the model "
            "sees, why one failed; starts them if they are not running",
        ),
        Subcommand(
            "help",
            "[COMMAND]",
            "the help: all of it, or one command's (as `%agent COMMAND --help`); "
            "`%agent --help`, `%%agent --help` and `%%agent?` show all of it",
            takes="name",
        ),
    )
}

CELL_FORM = """\
Run a prompt through the durable agent loop, or manage the session.

Cell form (the body is the prompt):

    %%agent [--model M] [--max-steps N] [--tools a,b,srv__*] [--approve auto|ask|deny]
            [--budget USD] [--demo]
    Find why tests/test_parse.py fails and fix it.

Without a key or base URL the offline demo model answers, but not in a session a
real model worked on: configure that model, or ask for the demo with `--demo`.

`--tools` names built-in tools and MCP tools (`srv__tool`; `srv__*` is every tool
of the MCP server srv). `--approve` applies to MCP tools like to bash; `ask`, the
default, asks before each call that changes things (Allow, Allow it for the rest of this
session, Deny), and where nobody can answer does not run it.

`{name}`, `{name.attr}`, `{name[key]}` are filled from your variables; `{{name}}`
keeps `{name}` as text. Nothing else changes: unknown names, `${VAR}`, other
braces, and code in ``` fences or `backticks` reach the model as written.
"""
CLOSING = """\
Every step is written to the session file before it takes effect; after a kernel
restart, `%load_ext tiny_agent_nb` reports what was interrupted.
"""


def _entry(head: str, text: str, indent: str = "    ") -> str:
    """`head` then `text` wrapped in a column (on the next line when `head` is wider)."""
    column = indent + " " * COLUMN
    if len(head) < COLUMN:
        first = indent + head.ljust(COLUMN)
        return textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=column)
    wrapped = textwrap.fill(text, WIDTH, initial_indent=column, subsequent_indent=column)
    return f"{indent}{head}\n{wrapped}"


def magic_help() -> str:
    """The whole help, before the option list argparse adds: `%%agent?`'s docstring."""
    rows = [_entry(s.usage, s.help) for s in SUBCOMMANDS.values()]
    return f"{CELL_FORM}\nLine form:\n\n" + "\n".join(rows) + f"\n\n{CLOSING}"


def command_help(name: str) -> str:
    """`%agent NAME --help`: its usage, its help line, and the options it takes."""
    command = SUBCOMMANDS[name]
    lines = [command.usage, "", textwrap.fill(command.help, WIDTH)]
    if command.options:
        lines += ["", "options (as %%agent's):"]
        lines += [_entry(OPTIONS[o][0], OPTIONS[o][1], indent="  ") for o in command.options]
    return "\n".join(lines) + "\n"


def check_command(args: Any) -> tuple[Subcommand, list[str]]:
    """The subcommand a line names and what follows its name, checked against the
    registry: a UsageError (no traceback) for an unknown name, an argument it does not
    take, or an option of `%%agent` it does not take."""
    names = ", ".join(SUBCOMMANDS)
    if not args.command:
        raise UsageError(f"%agent needs a command: {names} (see %agent help)")
    name, *rest = args.command
    command = SUBCOMMANDS.get(name)
    if command is None:
        raise UsageError(f"unknown command {name!r}; use one of {names}")
    for option in OPTIONS:
        given = getattr(args, option)
        if given not in (None, False) and option not in command.options:
            flag = OPTIONS[option][0]
            if option == "demo":
                raise UsageError("--demo goes with %%agent, %agent resume and %agent compact")
            if option in ("yes", "force", "undo"):
                raise UsageError(f"{flag} goes with %agent rewind")
            raise UsageError(f"%agent {name} takes no {flag} (see %agent {name} --help)")
    if rest and command.takes == "nothing":
        raise UsageError(f"%agent {name} takes no argument")
    if command.takes in ("path", "name", "number") and rest:
        rest = _shell_words(rest, name)
    return command, rest


def _shell_words(rest: list[str], name: str) -> list[str]:
    # IPython splits the line keeping quotes (and splits `my\\ notes.jsonl` in two): the
    # rest is read as a shell reads it, so `"my notes.jsonl"` names my notes.jsonl, as the
    # `%agent session` lines this package prints quote it.
    try:
        words = shlex.split(" ".join(rest))
    except ValueError as exc:
        raise UsageError(f"bad path: {' '.join(rest)!r} ({exc})") from None
    what = SUBCOMMANDS[name].arguments.strip("[]")
    if len(words) > 1:
        raise UsageError(f"%agent {name} takes one {what}")
    if words == [""]:  # `%agent session ""`: no path, not the default one
        raise UsageError(f"%agent {name} {what}: the {what.lower()} is empty")
    return words


def run_options(args: Any) -> dict[str, Any]:
    """What `%%agent` and `%agent resume` take from their options, checked: a bad one is a
    UsageError before anything is committed. `--tools ""` is no tools, not the default."""
    if args.demo and args.model is not None:
        raise UsageError("--demo and --model name two models: use one")
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError("--max-steps must be at least 1")
    if args.budget is not None and not 0 < args.budget < float("inf"):
        raise UsageError("--budget must be a positive number of USD, e.g. --budget 0.50")
    tools = None
    if args.tools is not None:
        # IPython splits the line keeping quotes: `--tools ""` arrives as '""', and means
        # no tools, as a shell reads it (the default, all of them, is no --tools at all).
        try:
            value = ",".join(shlex.split(args.tools))
        except ValueError as exc:
            raise UsageError(f"bad --tools {args.tools!r} ({exc})") from None
        tools = [t.strip() for t in value.split(",") if t.strip()]
    return {option: getattr(args, option) for option in RUN_OPTIONS} | {"tools": tools}


# ---------------------------------------------------------------- the prompt's fields
_FIELD = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[[^\[\]{}`\n]+\])*"
# `$` before a brace is the shell's `${x}`; a field touching another brace (`{{x}`,
# `{x}}}`) is none: only braces exactly around a name count.
_PLACE = re.compile(
    rf"(?<![${{])(?:\{{\{{(?P<escaped>{_FIELD})\}}\}}|\{{(?P<field>{_FIELD})\}})(?!\}})"
)
_FENCE = re.compile(r"^ {0,3}(?P<mark>`{3,}|~{3,})")
_SPAN = re.compile(r"(?<!`)(?P<ticks>`+)(?!`).*?(?<!`)(?P=ticks)(?!`)", re.DOTALL)


class PromptError(TinyAgentError, ValueError):
    """A `{name...}` field names a variable but not something it holds."""


def fill_prompt(text: str, namespace: Mapping[str, Any]) -> str:
    """`text` with its fields filled from `namespace` (see the module's rules)."""
    return "".join(
        piece if is_code else _fill_prose(piece, namespace)
        for piece, is_code in _code_and_prose(text)
    )


def _code_and_prose(text: str) -> list[tuple[str, bool]]:
    """`text` cut into (piece, is_code): fenced blocks and code spans are code."""
    pieces: list[tuple[str, bool]] = []
    prose: list[str] = []
    fence: str | None = None
    block: list[str] = []
    for line in text.splitlines(keepends=True):
        found = _FENCE.match(line)
        if fence is None:
            if found is not None and not (found["mark"][0] == "`" and "`" in line[found.end() :]):
                fence = found["mark"]
                pieces += _spans("".join(prose))
                prose, block = [], [line]
            else:
                prose.append(line)
        else:
            block.append(line)
            if found is not None and _closes(fence, found["mark"], line[found.end() :]):
                pieces.append(("".join(block), True))
                fence, block = None, []
    pieces += _spans("".join(prose))
    if block:  # a fence never closed runs to the end, as in Markdown
        pieces.append(("".join(block), True))
    return pieces


def _closes(fence: str, mark: str, rest: str) -> bool:
    """A closing fence: the opening's character, at least as long, nothing after it."""
    return mark[0] == fence[0] and len(mark) >= len(fence) and not rest.strip()


def _spans(prose: str) -> list[tuple[str, bool]]:
    pieces: list[tuple[str, bool]] = []
    start = 0
    for span in _SPAN.finditer(prose):
        pieces += [(prose[start : span.start()], False), (span.group(0), True)]
        start = span.end()
    pieces.append((prose[start:], False))
    return pieces


def _fill_prose(text: str, namespace: Mapping[str, Any]) -> str:
    def fill(match: re.Match[str]) -> str:
        escaped = match["escaped"]
        if escaped is not None:
            return "{" + escaped + "}"
        field = match["field"]
        name = re.match(r"[A-Za-z_]\w*", field)
        assert name is not None
        if name.group(0) not in namespace:
            return match.group(0)
        try:  # `.attr` and `[key]` looked up as `str.format` does
            value, _ = string.Formatter().get_field(field, (), namespace)
        except Exception as exc:
            raise PromptError(
                f"{{{field}}} in the prompt fails ({type(exc).__name__}: {exc}); nothing was "
                f"sent. Write {{{{{field}}}}} to keep the braces as text."
            ) from None
        return str(value)

    return _PLACE.sub(fill, text)
