"""The set of tools one agent run may call, looked up by name.

Schemas come out sorted by name so that the same tools always give the same
`configurationDigest`, whatever order they were registered in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..provider import ToolSchema
from ._base import Tool
from ._bash import Bash
from ._grep import Grep
from ._python import Python
from ._read import ListFiles, ReadFile
from ._write import EditFile, WriteFile


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
        return [self._tools[name].schema() for name in self.names]

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """Only the named tools (e.g. `%%agent --tools read_file,grep`)."""
        wanted = list(dict.fromkeys(names))
        unknown = [name for name in wanted if name not in self._tools]
        if unknown:
            raise ValueError(
                f"unknown tool(s): {', '.join(unknown)}; "
                f"known tools: {', '.join(self.names) or 'none'}"
            )
        return ToolRegistry(self._tools[name] for name in wanted)

    def __iter__(self) -> Iterator[Tool]:
        return (self._tools[name] for name in self.names)

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __repr__(self) -> str:
        return f"ToolRegistry({', '.join(self.names)})"


def builtin_registry() -> ToolRegistry:
    """All seven built-in tools."""
    return ToolRegistry(
        [ReadFile(), ListFiles(), Grep(), WriteFile(), EditFile(), Bash(), Python()]
    )
