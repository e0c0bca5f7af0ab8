"""Tools the agent can call: identity, replay policy, confinement to the workspace."""

from ._base import (
    DEFAULT_OUTPUT_LIMIT,
    Tool,
    ToolArgumentError,
    ToolArguments,
    ToolContext,
    ToolOutput,
    truncate,
)

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "Tool",
    "ToolArgumentError",
    "ToolArguments",
    "ToolContext",
    "ToolOutput",
    "truncate",
]
