"""Tools the agent can call: identity, replay policy, confinement to the workspace.

registry = builtin_registry()              # or .subset(["read_file", "grep"])
tool = registry.get("read_file")
arguments = tool.effective_arguments({"path": "setup.py"})   # recorded in toolStarted
output = tool.run(arguments, ToolContext(workspace=Path(root).resolve()))
"""

from ._base import (
    OutsideWorkspaceError,
    Tool,
    ToolArgumentError,
    ToolArguments,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolSchema,
    ToolUsage,
)
from ._bash import KEY_VARIABLES
from ._cells import CELL_CHANGE_APPLIED, change_diff
from ._files import ReadFile
from ._limits import clean_text, truncate
from ._names import unescape_path
from ._notebook import (
    ApplyOutcome,
    CellChange,
    CellType,
    Notebook,
    NotebookCell,
    NotebookCells,
)
from ._paths import parent_directory
from ._registry import NOTEBOOK_TOOLS, ToolRegistry, builtin_registry

__all__ = [
    "CELL_CHANGE_APPLIED",
    "KEY_VARIABLES",
    "NOTEBOOK_TOOLS",
    "ApplyOutcome",
    "CellChange",
    "CellType",
    "Notebook",
    "NotebookCell",
    "NotebookCells",
    "OutsideWorkspaceError",
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
    "builtin_registry",
    "change_diff",
    "clean_text",
    "parent_directory",
    "truncate",
    "unescape_path",
]
