"""A hostile MCP server (tests/helpers/mcp_hostile_server.py says whatever it is scripted to)
and a hostile configuration: nothing they send makes the kernel fetch an address, hang,
fail a run, corrupt the usage totals, or log a secret."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_agent_loop import Harness, workspace

from tiny_agent_nb.mcp import McpConfigError, McpServers, parse_config
from tiny_agent_nb.session import load_session
from tiny_agent_nb.tools import ToolArgumentError, ToolContext, ToolUsage

from helpers.mcp_helpers import started, stdio_entry, tool_named
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until

__all__ = ["workspace"]  # the fixture, shared with test_agent_loop

HOSTILE = Path(__file__).resolve().parent / "helpers" / "mcp_hostile_server.py"
OBJECT = {"type": "object"}
FOUR_MB = 4 * 1024 * 1024  # what a configuration file may hold


def hostile(tmp_path: Path, script: dict[str, Any]) -> Any:
    """The configuration of one server `h`: the hostile server playing `script`."""
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    entry = {"command": sys.executable, "args": [str(HOSTILE), str(path)]}
    return parse_config({"mcpServers": {"h": entry}})


@pytest.fixture
def fetches() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server serving a JSON Schema to anyone; the paths it was asked."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- input schemas


def test_a_schema_ref_to_a_url_is_never_fetched(
    tmp_path: Path, fetches: tuple[str, list[str]]
) -> None:
    base, asked = fetches
    schema = {"type": "object", "properties": {"x": {"$ref": f"{base}/schema.json"}}}
    config = hostile(tmp_path, {"tools": [{"name": "r", "inputSchema": schema}]})
    with started(config) as (servers, lines):
        assert lines == []
        tool = tool_named(servers, "h__r")
        with pytest.raises(ToolArgumentError, match="cannot be checked"):
            tool.effective_arguments({"x": "a"})
    assert asked == []  # jsonschema's default would have GET it from the kernel


def test_a_schema_ref_to_nowhere_is_an_error_result_and_the_run_completes(
    tmp_path: Path, server: OpenAIServer, workspace: Path
) -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}}
    config = hostile(tmp_path, {"tools": [{"name": "r", "inputSchema": schema}]})
    with started(config) as (servers, lines):
        assert lines == []
        h = Harness(server, workspace, extra_tools=tuple(servers.tools()))
        try:
            server.enqueue(
                tool_calls_reply(tool_call("c1", "h__r", {"x": "a"})), text_reply("done")
            )
            result = h.loop.run("call it")
        finally:
            h.close()
    assert result.outcome == "completed"  # not "failed" by an unexpected error
    state = load_session(h.path)
    (intent,) = state.tool_intents.values()
    assert intent.status == "error"
    (output,) = h.tool_ends
    assert "cannot be checked" in output.content and "no call of it is sent" in output.content


def test_a_backtracking_pattern_in_a_schema_does_not_hold_the_kernel(tmp_path: Path) -> None:
    # ^(a+)+$ against "aaa...ab" backtracks 2**n times in Python's re, which Ctrl-C
    # cannot interrupt: 26 letters are ~10 s, 40 are days.
    schema = {
        "type": "object",
        "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}},
        "patternProperties": {"^(b+)+$": {"type": "string"}},
        "additionalProperties": False,
    }
    config = hostile(tmp_path, {"tools": [{"name": "r", "inputSchema": schema}]})
    with started(config) as (servers, lines):
        assert lines == []
        tool = tool_named(servers, "h__r")
        arguments = {"x": "a" * 26 + "!", "b" * 26 + "!": "y"}
        # Accepted, though neither matches: no pattern ran here (the server checks them).
        assert tool.effective_arguments(arguments) == arguments
        with pytest.raises(ToolArgumentError, match="is not of type 'string'"):
            tool.effective_arguments({"x": 1})  # every other keyword is still checked


@pytest.mark.parametrize(
    ("cursor", "said"), [("same", "a page it already gave"), ("new", "yet another")]
)
def test_a_tools_list_that_never_ends_is_one_line_at_once(
    tmp_path: Path, cursor: str, said: str
) -> None:
    tools = [{"name": "p", "inputSchema": OBJECT}]
    config = hostile(tmp_path, {"tools": tools, "pages_forever": cursor})
    with started(config, start_timeout=60) as (servers, lines):
        (line,) = lines
        # Not "did not answer initialize and tools/list within 60 s": the pages were
        # refused before the start_timeout.
        assert "did not start: its tools/list never ends (page " in line and said in line
        assert servers.status()[0].state == "failed"


# ---------------------------------------------------------------- results


@pytest.mark.parametrize(
    "usage",
    [{"cost": 1e308}, {"inputTokens": 10**30}, {"outputTokens": 2**53}, {"cost": 2.0**53}],
)
def test_usage_beyond_an_exact_json_number_is_no_usage(
    tmp_path: Path, usage: dict[str, Any]
) -> None:
    # Summed into the session's totals, 1e308 twice is infinity.
    results = {
        "u": {"content": [{"type": "text", "text": "x"}], "_meta": {"usage": usage}},
        "fine": {"content": [], "_meta": {"usage": {"inputTokens": 2**53 - 1, "cost": 0.5}}},
    }
    tools = [{"name": "u", "inputSchema": OBJECT}, {"name": "fine", "inputSchema": OBJECT}]
    config = hostile(tmp_path, {"tools": tools, "results": results})
    context = ToolContext(workspace=tmp_path)
    with started(config) as (servers, lines):
        assert lines == []
        assert tool_named(servers, "h__u").run({}, context).usage is None
        fine = tool_named(servers, "h__fine").run({}, context).usage
        assert fine == ToolUsage(input_tokens=2**53 - 1, cost=0.5)


# ---------------------------------------------------------------- configuration


def test_a_configuration_path_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "mcp.json"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def parse() -> None:
        try:
            parse_config(str(fifo))
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=parse, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # blocked in open(): let it go before failing
        os.close(os.open(fifo, os.O_RDWR))
        reader.join(10)
        pytest.fail("parse_config blocked on a FIFO until something opened it for writing")
    (error,) = outcome
    assert isinstance(error, McpConfigError)
    assert "not a regular file" in str(error)


def test_a_configuration_file_far_too_large_is_refused(tmp_path: Path) -> None:
    # The same bound keeps /dev/zero (also refused: no regular file) from filling memory.
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {}}' + " " * FOUR_MB)
    with pytest.raises(McpConfigError, match="larger than 4 MB"):
        parse_config(str(path))
    with pytest.raises(McpConfigError, match="not a regular file"):
        parse_config("/dev/zero")


@pytest.mark.parametrize("as_file", [False, True])
def test_a_deeply_nested_configuration_is_a_configuration_error(
    tmp_path: Path, as_file: bool
) -> None:
    text = '{"mcpServers": ' + "[" * 100_000 + "]" * 100_000 + "}"
    value = text
    if as_file:
        (tmp_path / "mcp.json").write_text(text)
        value = str(tmp_path / "mcp.json")
    with pytest.raises(McpConfigError, match="nested too deeply"):
        parse_config(value)


# ---------------------------------------------------------------- logs


def _fresh_python(program: str) -> subprocess.CompletedProcess[str]:
    """`program` run by a fresh interpreter (no logging configured, as a kernel's), with
    this test run's import path; its exit code, stdout and stderr."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", program],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_a_header_value_httpcore2_refuses_is_not_logged_by_it(tmp_path: Path) -> None:
    # In a fresh interpreter: httpcore2 makes its connection loggers on the first
    # connection, after the redacting filter was installed; another test having
    # connected before would hide that.
    secret = "sentinel-header-3b6a0c9e"
    script = textwrap.dedent(
        f"""
        import logging, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from helpers.mcp_helpers import HttpTestServer
        from tiny_agent_nb.mcp import McpServers, parse_config
        records = []
        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record.getMessage() + (record.exc_text or ""))
        logging.getLogger().addHandler(Keep())
        logging.getLogger().setLevel(logging.DEBUG)
        with HttpTestServer() as http:
            entry = {{"url": http.url, "headers": {{"Authorization": "Bearer {secret}\\nX: 1"}}}}
            config = parse_config({{"mcpServers": {{"h": entry}}}})
            servers = McpServers(config, start_timeout=10)
            print(servers.start())
            servers.close()
        print(len(records))
        print("\\n".join(r for r in records if "Illegal header" in r or {secret!r} in r))
        """
    )
    done = _fresh_python(script)
    assert done.returncode == 0, done.stderr
    assert "Illegal header value" in done.stdout  # it was refused, and said so
    assert secret not in done.stdout + done.stderr


def test_a_server_printing_to_stdout_puts_no_traceback_in_the_cell(tmp_path: Path) -> None:
    # A fresh interpreter without logging configured, as a kernel is: the cell shows
    # whatever reaches stderr, and logging's last resort writes there.
    script = {
        "tools": [{"name": "p", "inputSchema": OBJECT}],
        "before_result": ["Starting the server... \x1b[32mok\x1b[0m"],
        "results": {"p": {"content": [{"type": "text", "text": "the answer"}]}},
    }
    entry = hostile(tmp_path, script).servers[0]
    servers = {"mcpServers": {"h": {"command": entry.command, "args": list(entry.args)}}}
    program = textwrap.dedent(
        f"""
        from pathlib import Path
        from tiny_agent_nb.mcp import McpServers, parse_config
        from tiny_agent_nb.tools import ToolContext
        servers = McpServers(parse_config({servers!r}))
        print(servers.start())
        (tool,) = servers.tools()
        print(tool.run({{}}, ToolContext(workspace=Path({str(tmp_path)!r}))).content)
        servers.close()
        """
    )
    done = _fresh_python(program)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "the answer"]
    assert done.stderr == ""


# ---------------------------------------------------------------- lifecycle


def _children_saying(marker: str) -> list[int]:
    """This process's live children whose command line holds `marker`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            after_comm = stat.read_text().rpartition(")")[2].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        mine = int(after_comm[1]) == os.getpid() and after_comm[0] != "Z"
        if mine and marker.encode() in command:
            found.append(int(stat.parent.name))
    return found


def test_two_threads_starting_at_once_spawn_one_server_and_close_leaves_none() -> None:
    marker = f"attack-{os.getpid()}-{time.monotonic_ns()}"
    config = parse_config({"mcpServers": {"t": stdio_entry("--say", marker)}})
    servers = McpServers(config)
    both = threading.Barrier(2)
    lines: list[list[str]] = []

    def start() -> None:
        both.wait()
        lines.append(servers.start())

    try:
        starters = [threading.Thread(target=start) for _ in range(2)]
        for starter in starters:
            starter.start()
        for starter in starters:
            starter.join(60)
        assert lines == [[], []]
        assert len(_children_saying(marker)) == 1
    finally:
        servers.close()
    wait_until(lambda: not _children_saying(marker), 10, "every server process gone")
