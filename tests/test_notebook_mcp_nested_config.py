"""The notebook's MCP configuration value from a hostile environment."""

from __future__ import annotations

import pytest

from tiny_agent_nb.notebook import TinyAgent
from tiny_agent_nb.notebook._loops import KernelServers


def test_a_deeply_nested_mcp_servers_value_is_one_line_and_breaks_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # From the environment, the value is read for every run (its secrets are redacted
    # from every tool's output): a RecursionError there stopped the built-in tools too.
    deep = '{"mcpServers": ' + "[" * 100_000 + "]" * 100_000 + "}"
    monkeypatch.setenv("TINY_AGENT_MCP_SERVERS", deep)
    config = TinyAgent()
    assert config.mcp_servers == f"<JSON that does not parse, {len(deep)} characters: not shown>"
    assert config.mcp_source() == deep
    config.secrets()  # no RecursionError
    (line,) = KernelServers(config).start()
    assert line.startswith(
        "tiny-agent-nb: TinyAgent.mcp_servers: the MCP configuration is nested too deeply to "
        "read; an mcpServers object is a few levels deep. No MCP server was started; "
    )
    config.mcp_servers = deep  # set in the cell: the same, no traceback
    assert config.mcp_source() == deep
