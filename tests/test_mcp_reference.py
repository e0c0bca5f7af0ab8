"""The published reference server `mcp-server-time` (installed from the package index)
driven through `%%agent`, the loopback model server scripting its tool calls."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.session import load_session

from helpers.ipython_shell import fresh_shell, served
from helpers.mcp_helpers import process_entry
from helpers.mcp_notebook_helpers import tool_names, tool_results
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

TIME_SERVER = process_entry("-m", "mcp_server_time")


@pytest.fixture
def shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: OpenAIServer
) -> Iterator[InteractiveShell]:
    # Through the environment variable, as a user with a configuration file would.
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"time": TIME_SERVER}}), encoding="utf-8")
    env = {**served(server.base_url, None), "TINY_AGENT_MCP_SERVERS": str(config)}
    yield from fresh_shell(tmp_path, monkeypatch, env)


def test_the_time_server_answers_through_agent_with_its_published_identity(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shell.run_line_magic("load_ext", "tiny_agent_nb")
    server.enqueue(
        tool_calls_reply(
            tool_call("now", "time__get_current_time", {"timezone": "UTC"}),
            tool_call(
                "tokyo",
                "time__convert_time",
                {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
            ),
            tool_call("mars", "time__get_current_time", {"timezone": "Mars/Olympus_Mons"}),
        ),
        text_reply("It is noon in UTC, nine in the evening in Tokyo."),
    )
    before = datetime.now().astimezone()
    result = shell.run_cell("%%agent\nWhat time is it, and in Tokyo at noon UTC?")
    out = capsys.readouterr()
    assert result.error_in_exec is None and out.err == "" and "Traceback" not in out.out
    assert "✓ time__get_current_time completed" in out.out
    assert "✓ time__convert_time completed" in out.out
    assert "✗ time__get_current_time error" in out.out  # an unknown zone: isError

    assert {"time__get_current_time", "time__convert_time"} <= tool_names(server.requests[0])
    results = tool_results(server.requests[1])
    now = _json_in(results["now"])
    assert now["timezone"] == "UTC"
    said = datetime.fromisoformat(now["datetime"])
    assert abs((said - before).total_seconds()) < 120
    tokyo = _json_in(results["tokyo"])
    assert tokyo["source"]["timezone"] == "UTC" and tokyo["target"]["timezone"] == "Asia/Tokyo"
    assert datetime.fromisoformat(tokyo["target"]["datetime"]).strftime("%H:%M") == "21:00"
    assert tokyo["time_difference"] == "+9.0h"
    assert "Mars/Olympus_Mons" in results["mars"]

    state = load_session(tmp_path / "analysis.agent.jsonl")
    identities = {
        (i.tool.name, i.tool.version, i.tool.source, i.replay_policy, i.status)
        for i in state.tool_intents.values()
    }
    published = version("mcp-server-time")  # what the server reports as serverInfo.version
    assert identities == {
        ("get_current_time", published, "mcp:time", "never", "completed"),
        ("convert_time", published, "mcp:time", "never", "completed"),
        ("get_current_time", published, "mcp:time", "never", "error"),
    }

    shell.run_line_magic("agent", "mcp")
    listing = capsys.readouterr().out
    assert f"time — running (stdio: {sys.executable} -m mcp_server_time), version {published}" in (
        listing
    )
    assert "time__convert_time" in listing and "time__get_current_time" in listing


def _json_in(content: str) -> dict[str, object]:
    """The JSON object a result carries (the server sends it as a text block)."""
    start = content.index("{")
    parsed, _ = json.JSONDecoder().raw_decode(content[start:])
    assert isinstance(parsed, dict)
    return parsed


README = Path(__file__).resolve().parent.parent / "README.md"


def readme_example() -> tuple[str, dict[str, Any]]:
    """The README's MCP section up to its JSON example, and the example."""
    section = README.read_text(encoding="utf-8").split("## MCP tools", 1)[1]
    before, example = section.split("```json\n", 1)
    return before, json.loads(example.split("```", 1)[0])


@pytest.fixture
def readme_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: OpenAIServer
) -> Iterator[InteractiveShell]:
    _, config = readme_example()
    env = {**served(server.base_url, None), "TINY_AGENT_MCP_SERVERS": json.dumps(config)}
    yield from fresh_shell(tmp_path, monkeypatch, env)


def test_the_readmes_mcp_example_works_as_written(
    readme_shell: InteractiveShell, server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The JSON of the README's MCP section, exactly as written, after the install it
    names: the model calls `time__get_current_time` and the server answers."""
    before, config = readme_example()
    (command,) = {s["command"] for s in config["mcpServers"].values()}
    assert f"`python3 -m pip install {command}`" in before  # how to get the command
    readme_shell.run_line_magic("load_ext", "tiny_agent_nb")
    server.enqueue(
        tool_calls_reply(tool_call("now", "time__get_current_time", {"timezone": "UTC"})),
        text_reply("It is now."),
    )
    capsys.readouterr()
    assert readme_shell.run_cell("%%agent\nWhat time is it?").error_in_exec is None
    out = capsys.readouterr().out
    assert "✓ time__get_current_time completed" in out, out
    assert '"timezone": "UTC"' in tool_results(server.requests[-1])["now"]
