"""`<server>__*` takes one MCP server's tools by their source (`mcp:<server>`), not by a
name prefix: the tools of a server `a_`, `a__b` or `aé` (seen by the model as `a_`) begin
with `a__` too, and `a__*` must not offer them, nor cover their servers in the
configuration digest."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.tools import ReadFile, Tool, ToolRegistry, builtin_registry

from helpers.ipython_shell import fresh_shell, run_clean, served
from helpers.mcp_helpers import TEST_TOOLS, stdio_entry
from helpers.mcp_notebook_helpers import tool_names, transactions
from helpers.openai_server import OpenAIServer, text_reply


class Served(ReadFile):
    """A tool as an MCP server's tool is seen: `<server as the model sees it>__<tool>`,
    its source the server's configured name."""

    def __init__(self, server: str, name: str) -> None:
        self.name = name  # type: ignore[misc]
        self.source = f"mcp:{server}"  # type: ignore[misc]


def _registry(*tools: Tool) -> ToolRegistry:
    return ToolRegistry([*builtin_registry(), *tools])


NEIGHBOURS = _registry(
    Served("a", "a__x"),
    Served("a_", "a___x"),  # begins with a__
    Served("a__b", "a__b__x"),  # begins with a__
    Served("aé", "a___y"),  # "aé" is seen as "a_": begins with a__
    Served("é", "___z"),  # "é" is seen as "_"
)


def test_a_server_pattern_takes_that_servers_tools_and_no_neighbours() -> None:
    assert NEIGHBOURS.subset(["a__*"]).names == ("a__x",)
    assert NEIGHBOURS.subset(["a___*"]).names == ("a___x", "a___y")  # a_ and aé
    assert NEIGHBOURS.subset(["a__b__*"]).names == ("a__b__x",)
    assert NEIGHBOURS.subset(["aé__*"]).names == ("a___y",)  # the configured name
    assert NEIGHBOURS.subset(["___*", "read_file"]).names == ("___z", "read_file")


def test_a_server_pattern_takes_no_builtin_tool_whose_name_would_match() -> None:
    registry = _registry(Served("a", "a__x"), Served("b", "b__x"))
    registry = ToolRegistry([*registry, _Named("a__builtin")])
    assert registry.subset(["a__*"]).names == ("a__x",)
    with pytest.raises(ValueError, match="no tool matches 'c__\\*'"):
        registry.subset(["c__*"])


def test_a_pattern_that_names_no_server_is_refused_even_where_a_name_begins_with_it() -> None:
    registry = _registry(Served("a_", "a___x"))
    with pytest.raises(ValueError) as raised:
        registry.subset(["a__*"])
    assert str(raised.value).startswith("no tool matches 'a__*'; known tools: a___x, bash")


class _Named(ReadFile):
    def __init__(self, name: str) -> None:
        self.name = name  # type: ignore[misc]


# ---------------------------------------------------------------- through %%agent

Run = Callable[[str], str]


@pytest.fixture
def run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    server: OpenAIServer,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Run]:
    env = {**served(server.base_url, None), "TINY_AGENT_MCP_SERVERS": None}
    for shell in fresh_shell(tmp_path, monkeypatch, env):
        yield lambda code, shell=shell: run_clean(shell, code, capsys)


def _configure(run: Run, servers: dict[str, dict[str, Any]]) -> None:
    run(f"%config TinyAgent.mcp_servers = {json.dumps({'mcpServers': servers})!r}")


def _digests(session: Path) -> list[str]:
    """The configurationDigest of each model request, in order."""
    return [
        fact["record"]["configurationDigest"]
        for transaction in transactions(session)
        for fact in transaction
        if fact.get("record", {}).get("type") == "stepAttempt"
    ]


def test_tools_option_offers_one_server_and_not_the_one_the_model_sees_as_its_prefix(
    run: Run, server: OpenAIServer, tmp_path: Path
) -> None:
    run("%load_ext tiny_agent_nb")
    # "tinyé" is seen as "tiny_": its tools are tiny___echo, ...
    _configure(run, {"tiny": stdio_entry(), "tinyé": stdio_entry()})
    server.enqueue(text_reply("one"), text_reply("two"), text_reply("three"))
    tiny = {f"tiny__{tool}" for tool in TEST_TOOLS}
    run("%%agent --tools tiny__*\nOnly tiny.")
    assert tool_names(server.requests[-1]) == tiny
    run("%%agent --tools tinyé__*\nOnly the other.")  # by its configured name
    assert tool_names(server.requests[-1]) == {f"tiny___{tool}" for tool in TEST_TOOLS}
    _configure(run, {"tiny": stdio_entry()})
    run("%%agent --tools tiny__*\nOnly tiny, alone.")
    assert tool_names(server.requests[-1]) == tiny
    # The digest covers the servers of the tools offered: the first run's is the one a
    # configuration without the other server gives.
    first, _, third = _digests(tmp_path / "analysis.agent.jsonl")
    assert first == third
