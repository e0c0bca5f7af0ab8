"""McpServers and McpTool against real servers: the SDK-written test server over stdio
and over streamable HTTP on loopback; each failure kind is one line, never a traceback
or a hang; a dead server's calls are error results; Ctrl-C and the call timeout cancel
a call with the protocol's notifications/cancelled."""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.mcp import McpServers, parse_config
from tiny_agent_nb.tools import ToolArgumentError, ToolContext, ToolUsage

from helpers.mcp_helpers import (
    TEST_SERVER_VERSION,
    TEST_TOOLS,
    HttpTestServer,
    pid_alive,
    started,
    stdio_entry,
    tool_named,
)
from helpers.mcp_notebook_helpers import processes_mentioning
from helpers.polling import wait_until


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpTestServer]:
    with HttpTestServer() as server:
        yield server


# The tools-and-results tests list the test server's tools and call stateless ones, each
# with a workspace of its own: they share one started server per transport (a stdio
# server is a Python start and the SDK's import each time), on one worker.
SHARED_SERVER = pytest.mark.xdist_group("mcp_servers_shared")


@pytest.fixture(scope="module", params=["stdio", "http"])
def servers(request: pytest.FixtureRequest, http_server: HttpTestServer) -> Iterator[McpServers]:
    """The test server as `t`, over each transport, started once for the module."""
    entry = stdio_entry() if request.param == "stdio" else {"url": http_server.url}
    with started(parse_config({"mcpServers": {"t": entry}})) as (servers, lines):
        assert lines == []
        yield servers


@pytest.fixture
def context(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path)


def config(**entries: dict[str, Any]) -> Any:
    return parse_config({"mcpServers": entries})


# ---------------------------------------------------------------- tools and results


@SHARED_SERVER
def test_every_tool_is_offered_as_server__tool_with_the_servers_identity(
    servers: McpServers,
) -> None:
    tools = servers.tools()
    assert [t.name for t in tools] == [f"t__{name}" for name in TEST_TOOLS]
    add = tool_named(servers, "t__add")
    assert add.identity.model_dump() == {
        "name": "add",
        "version": TEST_SERVER_VERSION,
        "source": "mcp:t",
    }
    assert add.replay_policy == "never"
    schema = add.schema()
    assert schema.name == "t__add"
    assert schema.description == "Add two integers."
    assert schema.parameters["required"] == ["a", "b"]
    (status,) = servers.status()
    assert (status.state, status.version, status.detail) == ("running", TEST_SERVER_VERSION, None)
    assert status.tools == tuple(t.name for t in tools)


@SHARED_SERVER
def test_text_and_is_error_results(servers: McpServers, context: ToolContext) -> None:
    assert tool_named(servers, "t__add").run({"a": 2, "b": 40}, context).content == "42"
    failed = tool_named(servers, "t__fail").run({"message": "disk full"}, context)
    assert (failed.content, failed.is_error) == ("disk full", True)


@SHARED_SERVER
def test_an_image_is_described_never_dumped(servers: McpServers, context: ToolContext) -> None:
    output = tool_named(servers, "t__image").run({}, context)
    assert output.content == "[image image/png, 70 B, not shown]"
    assert "iVBOR" not in output.content  # the PNG's base64


@SHARED_SERVER
def test_structured_content_is_compact_json_unless_a_text_block_carries_it(
    servers: McpServers, context: ToolContext
) -> None:
    structured = tool_named(servers, "t__structured").run({}, context)
    assert json.loads(structured.content) == {"temperature": 21.5, "unit": "C"}
    assert structured.content == '{"temperature":21.5,"unit":"C"}'
    # echo's result has a text block "hi" and structuredContent {"result": "hi"}.
    assert tool_named(servers, "t__echo").run({"text": "hi"}, context).content == "hi"


@SHARED_SERVER
def test_resources_are_shown_by_uri_with_text_and_blobs_described(
    servers: McpServers, context: ToolContext
) -> None:
    output = tool_named(servers, "t__resources").run({}, context)
    assert output.content.splitlines() == [
        "[resource file:///notes.txt]",
        "hello",
        "[resource file:///data.bin, application/zip, 2 KB, not shown]",
        "[resource link file:///big.csv (big.csv)]",
    ]
    assert base64.b64encode(bytes(2048)).decode()[:40] not in output.content


@SHARED_SERVER
def test_usage_the_tool_reports_in_its_result_meta(
    servers: McpServers, context: ToolContext
) -> None:
    output = tool_named(servers, "t__with_usage").run({}, context)
    assert output.usage == ToolUsage(input_tokens=120, output_tokens=30, cost=0.0042)
    assert tool_named(servers, "t__echo").run({"text": "x"}, context).usage is None


@SHARED_SERVER
def test_a_large_result_is_truncated_like_the_builtins(servers: McpServers, tmp_path: Path) -> None:
    output = tool_named(servers, "t__big").run(
        {"n": 5000}, ToolContext(workspace=tmp_path, output_limit=300)
    )
    assert "[... 4700 characters truncated ...]" in output.content
    assert output.content.startswith("abcdefghij")
    assert len(output.content) < 400


@SHARED_SERVER
def test_arguments_are_validated_against_the_input_schema_naming_the_field(
    servers: McpServers,
) -> None:
    add = tool_named(servers, "t__add")
    assert add.effective_arguments({"a": 1, "b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(ToolArgumentError, match=r"t__add: b: 'x' is not of type 'integer'"):
        add.effective_arguments({"a": 1, "b": "x"})
    with pytest.raises(ToolArgumentError, match=r"'b' is a required property"):
        add.parse_arguments({"a": 1})


@SHARED_SERVER
def test_effective_arguments_are_the_arguments_as_sent_without_defaults_filled(
    servers: McpServers, context: ToolContext
) -> None:
    greet = tool_named(servers, "t__greet")
    assert greet.schema().parameters["properties"]["greeting"]["default"] == "hello"
    assert greet.effective_arguments({"name": "Ada"}) == {"name": "Ada"}
    assert greet.run({"name": "Ada"}, context).content == "hello Ada"


# ---------------------------------------------------------------- names


def test_two_tools_landing_on_one_name_offer_the_first_and_say_so() -> None:
    with started(config(**{"a.b": stdio_entry(), "a_b": stdio_entry()})) as (servers, lines):
        names = [t.name for t in servers.tools()]
        assert names == [f"a_b__{name}" for name in TEST_TOOLS]
        assert {t.source for t in servers.tools()} == {"mcp:a.b"}
        assert len(lines) == len(TEST_TOOLS)
        assert lines[0] == (
            "MCP tool 'echo' of server a_b is not offered: its name a_b__echo is already "
            "taken by a.b's tool 'echo'. Rename a server in the configuration to offer both."
        )


def test_a_tool_whose_input_schema_is_invalid_is_refused_with_a_line() -> None:
    with started(config(t=stdio_entry("--bad-schema"))) as (servers, lines):
        assert lines == [
            "MCP tool 'odd' of server t is not offered: the server's input schema for it is "
            "invalid ('text' is not valid under any of the given schemas)."
        ]
        names = [t.name for t in servers.tools()]
        assert "t__odd" not in names
        assert "t__echo" in names


# ---------------------------------------------------------------- failures to start


def test_a_command_that_does_not_exist_is_one_line() -> None:
    with started(config(gone={"command": "no-such-mcp-server-xyz"})) as (servers, lines):
        # Said by the guard the server is started under (_guard.py), which exists.
        assert lines == [
            "MCP server gone (stdio: no-such-mcp-server-xyz) did not start: the server exited "
            "before it answered (stderr: cannot start no-such-mcp-server-xyz: No such file or "
            "directory). Its tools are not offered."
        ]
        (status,) = servers.status()
        assert (status.state, status.tools) == ("failed", ())
        assert servers.tools() == []


def test_a_server_that_exits_at_once_shows_its_last_stderr_line() -> None:
    entry = stdio_entry("--say", "warming up", "--say", "bad config: no API key", "--exit-at-once")
    with started(config(quits=entry)) as (servers, lines):
        (line,) = lines
        assert line.endswith(
            "did not start: the server exited before it answered (stderr: bad config: no API "
            "key). Its tools are not offered."
        )
        assert servers.status()[0].detail == (
            "the server exited before it answered (stderr: bad config: no API key)"
        )


def test_a_failed_start_is_tried_again_only_when_asked_but_a_dead_server_always(
    tmp_path: Path,
) -> None:
    """A run does not wait out a broken server's start again (retry=False: one line says
    how to try); `%agent mcp` (retry=True) does. Each start of the server is counted."""
    starts = tmp_path / "starts"
    script = f'echo start >> "{starts}"; exec "$0" "$@"'
    broken = {"command": "sh", "args": ["-c", script, sys.executable, "-c", "raise SystemExit(3)"]}
    servers = McpServers(config(broken=broken))
    try:
        (first,) = servers.start(retry=False)
        assert "did not start" in first and starts.read_text().count("start") == 1
        (again,) = servers.start(retry=False)
        assert again.startswith("MCP server broken did not start earlier (the server exited")
        assert again.endswith("its tools are not offered.")
        assert servers.failed_to_start() == ["broken"]
        assert starts.read_text().count("start") == 1  # not spawned again
        (asked,) = servers.start(retry=True)
        assert "did not start" in asked and starts.read_text().count("start") == 2
    finally:
        servers.close()


@pytest.mark.slow
def test_a_server_that_never_answers_initialize_is_bounded_by_start_timeout() -> None:
    said: list[str] = []
    states: list[str] = []

    def start_and_close() -> None:
        with started(config(mute=stdio_entry("--hang")), start_timeout=1.0) as (servers, lines):
            said.extend(lines)
            states.append(servers.status()[0].state)

    # 1 s, then the SDK's bounded shutdown of a server ignoring EOF and SIGTERM (~4 s). The
    # wait is against a start that waited for the server's answer, or a shutdown that
    # waited for the server (either would hang for good), not a measure.
    starting = threading.Thread(target=start_and_close, daemon=True)
    starting.start()
    starting.join(120)
    assert not starting.is_alive(), "the start or the close waits for a mute server for good"
    (line,) = said
    assert "did not answer initialize and tools/list within 1 s" in line
    assert states == ["failed"]


def test_an_http_url_refusing_connections_is_one_line(unused_port: int) -> None:
    url = f"http://127.0.0.1:{unused_port}/mcp"
    with started(config(down={"url": url})) as (_, lines):
        assert lines == [
            f"MCP server down (http: {url}) did not start: ConnectError: All connection attempts "
            "failed. Its tools are not offered."
        ]


def test_an_http_401_says_to_check_the_configured_headers() -> None:
    with HttpTestServer(authorization="Bearer right-token-123") as http:
        entry = {"url": http.url, "headers": {"Authorization": "Bearer wrong-token-456"}}
        with started(config(locked=entry)) as (servers, lines):
            (line,) = lines
            assert "did not start: HTTP 401 Unauthorized" in line
            assert "check the headers (credentials) configured for it" in line
        entry = {"url": http.url, "headers": {"Authorization": "Bearer right-token-123"}}
        with started(config(locked=entry)) as (servers, lines):
            assert lines == []
            assert servers.status()[0].state == "running"


@pytest.fixture
def unused_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_without_the_sdk_start_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp now fails, as if not installed
    servers = McpServers(config(t=stdio_entry()))
    assert servers.start() == [
        "MCP servers are configured but the `mcp` package is not installed: "
        "pip install 'tiny-agent-nb[mcp]'"
    ]
    assert servers.tools() == []
    servers.close()


def test_nothing_configured_starts_nothing() -> None:
    servers = McpServers(parse_config(None))
    assert servers.start() == []
    assert servers.status() == []
    servers.close()


# ---------------------------------------------------------------- a server dying later


def test_a_server_killed_later_gives_error_results_and_the_next_start_restarts_it(
    context: ToolContext,
) -> None:
    with started(config(t=stdio_entry())) as (servers, _):
        echo = tool_named(servers, "t__echo")
        pid = int(tool_named(servers, "t__pid").run({}, context).content)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: servers.status()[0].state == "failed", what="the death noticed")
        assert servers.status()[0].detail == "the server exited"
        assert servers.tools() == []
        dead = echo.run({"text": "hi"}, context)
        assert dead.is_error
        assert dead.content == "MCP server t is not running: the server exited"

        assert servers.start() == []
        assert servers.status()[0].state == "running"
        new_pid = int(tool_named(servers, "t__pid").run({}, context).content)
        assert new_pid != pid
        # A tool object from before the restart reaches the restarted server.
        assert echo.run({"text": "back"}, context).content == "back"


def test_a_call_in_flight_when_the_server_dies_is_an_error_result(
    context: ToolContext, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    with started(config(t=stdio_entry())) as (servers, _):
        sleeper = tool_named(servers, "t__mark_and_sleep")
        outputs = []
        call = threading.Thread(
            target=lambda: outputs.append(
                sleeper.run({"path": str(marker), "seconds": 60}, context)
            )
        )
        call.start()
        line = wait_until(lambda: marker.exists() and marker.read_text(), what="the call")
        os.kill(int(line.split()[0]), signal.SIGKILL)
        call.join(20)
        (output,) = outputs
        assert output.is_error
        assert output.content.startswith("MCP server t is not running: ")


def test_an_http_server_gone_later_gives_error_results_and_a_failed_state(
    context: ToolContext,
) -> None:
    with HttpTestServer() as http, started(config(h={"url": http.url})) as (servers, _):
        echo = tool_named(servers, "h__echo")
        http.kill()
        output = echo.run({"text": "hi"}, context)
        assert output.is_error
        assert output.content.startswith("MCP server h is not running: the connection was lost")
        wait_until(lambda: servers.status()[0].state == "failed", what="the loss noticed")
        assert servers.status()[0].detail.startswith("the connection was lost")
        assert echo.run({"text": "hi"}, context).content.startswith("MCP server h is not running")
        (line,) = servers.start()  # tried again: still gone
        assert "did not start: ConnectError" in line


# ---------------------------------------------------------------- cancellation


def _interrupted_call(servers: McpServers, context: ToolContext, marker: Path) -> None:
    """A 60 s call of t__mark_and_sleep, interrupted by SIGINT once the server's handler
    has started: KeyboardInterrupt at once, not the call's end 60 s later."""
    sleeper = tool_named(servers, "t__mark_and_sleep")

    def interrupt_when_started() -> None:
        wait_until(marker.exists, what="the call to start")
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        sleeper.run({"path": str(marker), "seconds": 60}, context)
    # Raised before the call's end: an interrupt held until the call returned would come
    # after the server's handler wrote "finished".
    assert not marker.read_text().endswith("finished\n"), marker.read_text()


def test_ctrl_c_during_a_call_returns_at_once_and_the_session_serves_the_next_call(
    sigint_raises: None, context: ToolContext, tmp_path: Path
) -> None:
    with started(config(t=stdio_entry(forked=False))) as (servers, _):
        _interrupted_call(servers, context, tmp_path / "marker")
        assert tool_named(servers, "t__echo").run({"text": "after"}, context).content == "after"


# The SDK's courtesy cancel (notifications/cancelled, sent by mcp's dispatcher when the
# call's task is cancelled) did not reach the server's handler in about one run in ten
# under load (in the suite, in the 3.13 version suite; never alone), with the server
# forked by the zygote or started fresh: cause not found. Ctrl-C itself is never lost (the
# test above); a server left running the call is the known miss, shown as one.
@pytest.mark.xfail(
    strict=False,
    reason="the SDK's notifications/cancelled is sometimes not seen by the server under load",
)
def test_ctrl_c_cancels_the_call_and_the_server_sees_the_cancellation(
    sigint_raises: None, context: ToolContext, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    with started(config(t=stdio_entry(forked=False))) as (servers, _):
        _interrupted_call(servers, context, marker)
        # notifications/cancelled reached the server: its handler was cancelled. Waited for
        # as the handler's end, either way (a lost cancellation ends it 60 s after its start
        # with "finished"), not for a time a loaded machine may take.
        ended = wait_until(
            lambda: marker.read_text().endswith(("cancelled\n", "finished\n")) and marker,
            90,
            what="the call's handler to end, cancelled or not",
        )
        assert ended.read_text().endswith("cancelled\n"), ended.read_text()


def test_a_call_past_the_call_timeout_is_cancelled_and_its_effect_unknown(
    context: ToolContext, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    with started(config(t=stdio_entry()), call_timeout=1.5) as (servers, _):
        output = tool_named(servers, "t__mark_and_sleep").run(
            {"path": str(marker), "seconds": 60}, context
        )
        assert output.is_error and output.timed_out
        assert output.content == (
            "MCP server t did not answer mark_and_sleep within 1.5 s; the call was cancelled, "
            "and whether it had an effect is unknown"
        )
        wait_until(lambda: marker.read_text().endswith("cancelled\n"), what="the cancellation")


@pytest.mark.slow
def test_ctrl_c_during_start_stops_what_was_starting(sigint_raises: None, tmp_path: Path) -> None:
    tag = str(tmp_path / "mute-server")  # in its command line, so that it can be found
    servers = McpServers(config(mute=stdio_entry("--say", tag, "--hang")), start_timeout=30)

    def interrupt_once_it_runs() -> None:
        # Not after a fixed delay: a start that first imports the SDK (the first start in
        # a process, on a loaded machine) was interrupted before it started anything.
        wait_until(lambda: processes_mentioning(tag), 30, what="the server process")
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_it_runs, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):  # not the start_timeout's failed start
        servers.start()
    assert servers.status()[0].state in ("failed", "stopped")
    servers.close()
    wait_until(lambda: not processes_mentioning(tag), 30, what="the server process to end")


# ---------------------------------------------------------------- close


def test_close_leaves_no_server_process_and_start_after_close_restarts(
    context: ToolContext,
) -> None:
    servers = McpServers(config(t=stdio_entry()))
    assert servers.start() == []
    pid = int(tool_named(servers, "t__pid").run({}, context).content)
    servers.close()
    wait_until(lambda: not pid_alive(pid), what="the server process to end")
    assert servers.status()[0].state == "stopped"
    assert servers.tools() == []
    servers.close()  # idempotent

    assert servers.start() == []
    again = int(tool_named(servers, "t__pid").run({}, context).content)
    assert again != pid
    servers.close()
    wait_until(lambda: not pid_alive(again), what="the restarted server to end")


@pytest.mark.slow
def test_close_is_bounded_when_a_server_ignores_stdin_eof_and_sigterm(
    context: ToolContext,
) -> None:
    servers = McpServers(config(t=stdio_entry("--stubborn")))
    assert servers.start() == []
    pid = int(tool_named(servers, "t__pid").run({}, context).content)
    # EOF 2 s, SIGTERM 2 s, then SIGKILL: ~4 s. The wait is against a close that waits
    # for the server for good (which would hang the test), not a measure.
    closing = threading.Thread(target=servers.close, daemon=True)
    closing.start()
    closing.join(60)
    assert not closing.is_alive(), "close() still waits for a server that ignores EOF and SIGTERM"
    wait_until(lambda: not pid_alive(pid), what="the stubborn server to be killed")
