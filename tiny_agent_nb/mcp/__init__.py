"""Tools from MCP servers (docs/spec.md §5), through the official `mcp` SDK.

    servers = McpServers(parse_config("~/.cursor/mcp.json"))
    problems = servers.start()        # one line per server that did not start
    tools = servers.tools()           # McpTool: "<server>__<tool>", replay policy never
    servers.close()

Importing this package does not import the SDK (nor httpx2): only `McpServers.start`
does, so a kernel without MCP servers never pays for it, and one without the SDK
installed gets one line saying what to install.
"""

from ._config import (
    McpConfig,
    McpConfigError,
    is_json_text,
    parse_config,
    read_config_file,
)
from ._servers import DEFAULT_CALL_TIMEOUT, DEFAULT_START_TIMEOUT, McpServers, ServerStatus

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_START_TIMEOUT",
    "McpConfig",
    "McpConfigError",
    "McpServers",
    "ServerStatus",
    "is_json_text",
    "parse_config",
    "read_config_file",
]
