"""The tool protocol: identity, argument model, replay policy, effect.

A tool's arguments are a pydantic model (strict, closed): the JSON Schema the model sees,
and the *effective* arguments (defaults filled in) recorded in `toolStarted`. `run`
performs the effect; an exception from it becomes an error result the model sees, but
KeyboardInterrupt passes, after the tool stopped its effect (bash kills its group).
Errors (`ToolError` and its subclasses, drawn in `_exceptions.py`) carry a message
written for the model.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast

from pydantic import BaseModel, ConfigDict, ValidationError

from .._exceptions import TinyAgentError
from ..session import FileStore, ReplayPolicy, ToolIdentity
from ._names import printable_path
from ._notebook import Notebook

DEFAULT_OUTPUT_LIMIT = 30_000  # characters of a result sent back to the model


@dataclass(frozen=True)
class ToolSchema:
    """A tool as the model sees it, plus its version. How it is put on the wire is the
    provider's business (`provider.wire`)."""

    name: str
    version: str
    description: str
    parameters: Mapping[str, Any]


class ToolArguments(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ToolError(TinyAgentError):
    """The tool could not do what was asked; the message says why, for the model."""


class ToolArgumentError(ToolError):
    """The arguments do not fit the tool's schema; nothing ran."""


class OutsideWorkspaceError(ToolError):
    """A path resolves (through `..`, an absolute form or a symlink) outside the
    workspace the file tools are confined to; nothing was read or written."""


class ToolTimeoutError(ToolError):
    """The tool stopped at its time limit; what it would have found is unknown."""


@dataclass(frozen=True)
class ToolContext:
    """What a tool may act on. `workspace` is the realpath of the root file tools are
    confined to (its string is the session's environmentIdentity)."""

    workspace: Path
    namespace: dict[str, Any] | None = None  # the python tool's globals (the notebook's)
    # What IPython put in the namespace for itself (`user_ns_hidden`): not the user's
    # variables, unless the user bound the name to something else since.
    hidden_variables: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # Hands code to the user to review (the notebook's `set_next_input`, or shown to copy
    # where no reply can carry one); returns where it went, as the model is told; raises
    # ToolError when it cannot. None outside a notebook.
    propose_cell: Callable[[str], str] | None = field(default=None, repr=False)
    # The notebook's cells, to read and (on the user's Accept) change. None outside one.
    notebook: Notebook | None = field(default=None, repr=False)
    # Asks the user about this call, shown as its recorded intent (a cell change as its
    # diff): True for Accept. The loop sets it for each call where someone can be asked.
    review: Callable[[], bool] | None = field(default=None, repr=False)
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    # The API key and the like: kept out of tools' child processes, and redacted from
    # every result before it is committed.
    secrets: tuple[str, ...] = field(default=(), repr=False)
    # Where write_file and edit_file keep the file's bytes before and after (the session's
    # file history). None: none kept, each such call recorded `kept: false`.
    file_store: FileStore | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ToolUsage:
    """Tokens and cost a tool reports about its own call (an MCP tool that calls a model),
    committed as a `usage` fact bound to the call's `toolStarted`. None on a ToolOutput
    means the tool reported nothing, not zero."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    cost: float | None = None  # USD; None: the tool did not say


@dataclass(frozen=True)
class ToolOutput:
    """A tool's result. Its last line says how it ended (bash's `[exit code N]`, python's
    exception line, an error's message): the line a person is shown when it fails."""

    content: str
    is_error: bool = False
    # The tool stopped at its time limit: what it would have found is unknown. A replay
    # that times out is recorded as interrupted, not as replayed (docs/spec.md §2.1).
    timed_out: bool = False
    usage: ToolUsage | None = None
    # The user refused the call when the tool asked (a cell change rejected): recorded as
    # `denied`, as a call `--approve ask` did not allow.
    denied: bool = False

    @property
    def ending(self) -> str:
        lines = [line for line in self.content.splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""


class Tool(ABC):
    name: ClassVar[str]
    version: ClassVar[str] = "1"
    source: ClassVar[str] = "builtin"
    description: ClassVar[str]
    replay_policy: ClassVar[ReplayPolicy]
    Arguments: ClassVar[type[ToolArguments]]
    # Whether a process this tool started may still run after its kernel died, as far as
    # this product can tell: a recovery report says so for each such interrupted call.
    may_outlive_kernel: ClassVar[bool] = False

    @property
    def asks_approval(self) -> bool:
        """Whether `--approve ask` asks before it runs (and `deny` refuses it): a tool that
        may change something, as `never` says unless the tool knows better."""
        return self.replay_policy == "never"

    @property
    def identity(self) -> ToolIdentity:
        return ToolIdentity(name=self.name, version=self.version, source=self.source)

    def schema(self) -> ToolSchema:
        parameters = self.Arguments.model_json_schema()
        parameters.pop("title", None)
        return ToolSchema(self.name, self.version, self.description, parameters)

    def prepare(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        """The effective arguments with what the tool reads before it acts (the source a
        cell change is made from): recorded in toolStarted, given to `run`. ToolError:
        the call is refused before its intent; nothing ran."""
        return arguments

    def effective_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """As recorded in toolStarted: validated, defaults filled in."""
        return self.parse_arguments(arguments).model_dump(mode="json")

    def parse_arguments(self, arguments: dict[str, Any]) -> ToolArguments:
        """The arguments as the tool's model; ToolArgumentError when they do not fit."""
        try:
            return self.Arguments.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ToolArgumentError(f"invalid arguments for {self.name}: {problems}") from None

    @abstractmethod
    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput: ...


ArgumentsT = TypeVar("ArgumentsT", bound=ToolArguments)


class BuiltinTool(Tool, Generic[ArgumentsT]):
    """A tool shipped with tiny-agent-nb. It implements `execute` with its typed arguments
    and simply raises; `run` is the one place a failure becomes a result the model sees,
    so every "file not found" reads the same. Anything else is a bug, left to the loop."""

    replay_policy: ClassVar[ReplayPolicy] = "never"  # a tool is replayed only if it says so

    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        try:
            # A ClassVar cannot name a type variable, hence the cast.
            return self.execute(cast(ArgumentsT, self.parse_arguments(arguments)), context)
        except ToolTimeoutError as exc:
            return ToolOutput(f"{self.name} {exc}", is_error=True, timed_out=True)
        except ToolError as exc:
            return ToolOutput(str(exc), is_error=True)
        except OSError as exc:
            return ToolOutput(describe_os_error(exc, context.workspace), is_error=True)

    @abstractmethod
    def execute(self, arguments: ArgumentsT, context: ToolContext) -> ToolOutput:
        """Perform the effect; raise ToolError / OSError for failures the model should see."""


def describe_os_error(exc: OSError, workspace: Path) -> str:
    """`<path>: <what went wrong>`, with the path as the model would write it."""
    what = exc.strerror or str(exc)
    what = what[:1].lower() + what[1:]  # "no such file or directory", after a path
    if exc.filename is None:
        return what
    return f"{display_path(os.fsdecode(exc.filename), workspace)}: {what}"


def display_path(path: str | Path, workspace: Path) -> str:
    """A path relative to the workspace when it lies inside it, else as given; escaped
    (`printable_path`) so that it is one line and tells every name apart."""
    try:
        relative = Path(path).relative_to(workspace)
    except ValueError:
        return printable_path(str(path))
    return printable_path(relative.as_posix()) or "."
