"""The set of tools one agent run may call, looked up by name.

Schemas come out sorted by name so that the same tools always give the same
`configurationDigest`, whatever order they were registered in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ._base import Tool, ToolSchema
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
        """Only the named tools (e.g. `%%agent --tools read_file,grep,github__*`). A name
        ending in `*` takes every tool whose name begins with what precedes it (an MCP
        server's tools: `github__*`); nothing else is a pattern, so `[` or `?` in a name
        mean themselves. ValueError names every exact name that is no tool and every
        pattern that matches none, and lists the known tools."""
        wanted = list(dict.fromkeys(names))
        exact = {name for name in wanted if not name.endswith("*")}
        prefixes = [name[:-1] for name in wanted if name.endswith("*")]
        problems = []
        if unknown := [name for name in wanted if name in exact and name not in self._tools]:
            problems.append(f"unknown tool(s): {', '.join(unknown)}")
        problems.extend(
            f"no tool matches {prefix + '*'!r}"
            for prefix in prefixes
            if not any(name.startswith(prefix) for name in self._tools)
        )
        if problems:
            raise ValueError(
                f"{'; '.join(problems)}; known tools: {', '.join(self.names) or 'none'}"
            )
        return ToolRegistry(
            tool
            for tool in self
            if tool.name in exact or any(tool.name.startswith(p) for p in prefixes)
        )

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
