"""Tools the agent can call: identity, replay policy, confinement to the workspace.

registry = builtin_registry()              # or .subset(["read_file", "grep"])
tool = registry.get("read_file")
arguments = tool.effective_arguments({"path": "setup.py"})   # recorded in toolStarted
output = tool.run(arguments, ToolContext(workspace=Path(root).resolve()))
"""

from ._base import (
    DEFAULT_OUTPUT_LIMIT,
    OutsideWorkspaceError,
    Tool,
    ToolArgumentError,
    ToolArguments,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolSchema,
    ToolUsage,
    truncate,
)
from ._bash import KEY_VARIABLES, Bash
from ._builtin import BuiltinTool
from ._grep import Grep
from ._output import CappedOutput, clean_text
from ._propose import ProposeCell
from ._python import Python
from ._read import ListFiles, ReadFile
from ._registry import ToolRegistry, builtin_registry
from ._variables import ListVariables
from ._write import EditFile, WriteFile

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "KEY_VARIABLES",
    "Bash",
    "BuiltinTool",
    "CappedOutput",
    "EditFile",
    "Grep",
    "ListFiles",
    "ListVariables",
    "OutsideWorkspaceError",
    "ProposeCell",
    "Python",
    "ReadFile",
    "Tool",
    "ToolArgumentError",
    "ToolArguments",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolRegistry",
    "ToolSchema",
    "ToolUsage",
    "WriteFile",
    "builtin_registry",
    "clean_text",
    "truncate",
]
