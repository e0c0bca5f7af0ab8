"""The set of tools one agent run may call, looked up by name, and the built-in ones.

Schemas come out sorted by name so that the same tools always give the same
`configurationDigest`, whatever order they were registered in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ._base import Tool, ToolSchema
from ._bash import Bash
from ._cells import DeleteCell, EditCell, InsertCell
from ._files import Grep, ListFiles, ReadFile
from ._propose import ProposeCell
from ._python import Python
from ._read_notebook import ReadNotebook
from ._variables import ListVariables
from ._writing import EditFile, WriteFile

BUILTIN_TOOLS = (
    ReadFile,
    ListFiles,
    Grep,
    WriteFile,
    EditFile,
    Bash,
    Python,
    ListVariables,
    ProposeCell,
    ReadNotebook,
    EditCell,
    InsertCell,
    DeleteCell,
)
# The tools that read or change a notebook's cells: not offered where a run has none, as
# their schemas would cost every request's tokens for nothing.
NOTEBOOK_TOOLS = tuple(tool.name for tool in (ReadNotebook, EditCell, InsertCell, DeleteCell))


def builtin_registry() -> ToolRegistry:
    """All the built-in tools."""
    return ToolRegistry(tool() for tool in BUILTIN_TOOLS)


class ToolRegistry:
    """Tools by name; a name appears at most once."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._tools))

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schemas(self) -> list[ToolSchema]:
        return [tool.schema() for tool in self]

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """Only the named tools (`%%agent --tools read_file,grep,github__*`). `<server>__*`
        takes every tool of that MCP server, by its source (`a__*` is not also a server
        `a_`'s); any other name ending in `*` is a prefix; nothing else is a pattern.
        ValueError names each name and pattern that takes no tool, and the known tools."""
        wanted = list(dict.fromkeys(names))
        exact = {name for name in wanted if not name.endswith("*")}
        patterns = [name for name in wanted if name.endswith("*")]
        problems = []
        if unknown := [name for name in wanted if name in exact and name not in self._tools]:
            problems.append(f"unknown tool(s): {', '.join(unknown)}")
        problems.extend(
            f"no tool matches {pattern!r}"
            for pattern in patterns
            if not any(_matches(tool, pattern) for tool in self)
        )
        if problems:
            raise ValueError(
                f"{'; '.join(problems)}; known tools: {', '.join(self.names) or 'none'}"
            )
        return ToolRegistry(
            tool for tool in self if tool.name in exact or any(_matches(tool, p) for p in patterns)
        )

    def __iter__(self) -> Iterator[Tool]:
        return (self._tools[name] for name in self.names)

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __repr__(self) -> str:
        return f"ToolRegistry({', '.join(self.names)})"


def _matches(tool: Tool, pattern: str) -> bool:
    """Whether `pattern` (a name ending in `*`) takes `tool` (see `ToolRegistry.subset`)."""
    if not pattern.endswith("__*"):
        return tool.name.startswith(pattern[:-1])
    # A tool of server `server`: its source is `mcp:<name>` with `name` the server as
    # configured, or as the model sees it, which begins the tool's name. The model's name
    # makes each character outside `[A-Za-z0-9_-]` one `_` (`model_tool_name`), so it is
    # exactly as long: "aé" is seen as "a_", which `a__*` does not take.
    server = pattern[:-3]
    if not tool.source.startswith("mcp:"):
        return False
    name = tool.source.removeprefix("mcp:")
    return name == server or (len(name) == len(server) and tool.name.startswith(f"{server}__"))
