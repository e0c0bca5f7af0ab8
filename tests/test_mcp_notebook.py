"""MCP tools through `%%agent` in an in-process shell: the SDK-written test server
(tests/helpers/mcp_test_server.py) over stdio and over streamable HTTP on loopback, the loopback
model server scripting the calls, and the session file read back."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.mcp import McpServers, parse_config
from tiny_agent_nb.session import HeaderInit, SessionStore, ToolIdentity, load_session
from tiny_agent_nb.tools import ToolContext

from helpers.ipython_shell import fresh_shell, run_clean, served
from helpers.mcp_helpers import TEST_SERVER, TEST_SERVER_VERSION, TEST_TOOLS, pid_alive, stdio_entry
from helpers.mcp_notebook_helpers import (
    HEADER_SECRET,
    http_server,  # noqa: F401 (a fixture, used by name)
    tool_names,
    tool_results,
    transactions,
)
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until
from helpers.scenario import Run as ScenarioRun

SESSION = "analysis.agent.jsonl"
ENV_SECRET = "SENTINEL-ENV-0a1b2c3d4e"

Run = Callable[[str], str]


@pytest.fixture
def shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: OpenAIServer
) -> Iterator[InteractiveShell]:
    env = {**served(server.base_url, None), "TINY_AGENT_MCP_SERVERS": None}
    yield from fresh_shell(tmp_path, monkeypatch, env)


@pytest.fixture
def run(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> Run:
    """Run a cell; its output, which must hold no traceback and nothing on stderr."""

    return lambda code: run_clean(shell, code, capsys)


def tool_usage(fact: dict[str, Any]) -> bool:
    return fact["kind"] == "usage" and bool(fact["usage"].get("toolStartedId"))


def configure(run: Run, servers: dict[str, dict[str, Any]]) -> None:
    run("%load_ext tiny_agent_nb")
    value = json.dumps({"mcpServers": servers})
    run(f"%config TinyAgent.mcp_servers = {value!r}")


def test_stdio_tools_are_called_with_their_identity_usage_and_a_described_image(
    run: Run, server: OpenAIServer, tmp_path: Path
) -> None:
    configure(run, {"tiny": stdio_entry()})
    marker = tmp_path / "marker.txt"
    server.enqueue(
        tool_calls_reply(
            tool_call("c1", "tiny__echo", {"text": "hello from MCP"}),
            tool_call("c2", "tiny__with_usage", {}),
            tool_call("c3", "tiny__image", {}),
            tool_call("c4", "tiny__mark_and_sleep", {"path": str(marker), "seconds": "soon"}),
            tool_call("c5", "tiny__fail", {"message": "the server says no"}),
        ),
        text_reply("Done."),
    )
    out = run("%%agent\nUse the MCP tools.")
    assert "✓ tiny__echo completed" in out and "✓ tiny__with_usage completed" in out
    assert "✗ tiny__mark_and_sleep error" in out and "✗ tiny__fail error" in out
    assert "Done." in out

    offered = tool_names(server.requests[0])
    assert {"tiny__echo", "tiny__mark_and_sleep", "bash", "read_file"} <= offered
    echo_schema = next(
        t["function"]
        for t in server.requests[0].body["tools"]
        if t["function"]["name"] == "tiny__echo"
    )
    assert echo_schema["parameters"]["properties"]["text"]["type"] == "string"

    state = load_session(tmp_path / SESSION)
    intents = {i.tool_call_id: i for i in state.tool_intents.values()}
    echo = intents["c1"]
    assert (echo.tool.name, echo.tool.version, echo.tool.source) == (
        "echo",
        TEST_SERVER_VERSION,
        "mcp:tiny",
    )
    assert echo.replay_policy == "never" and echo.arguments == {"text": "hello from MCP"}
    results = tool_results(server.requests[1])
    assert results["c1"] == "hello from MCP"
    # The image is described for the model, not dumped as base64.
    assert "image/png" in results["c3"] and "iVBORw0KGgo" not in results["c3"]
    assert "iVBORw0KGgo" not in (tmp_path / SESSION).read_text()
    assert "the server says no" in results["c5"]
    assert intents["c5"].status == "error"

    # Usage the tool reported about itself: a usage fact bound to its toolStarted, in
    # the same transaction as its result.
    facts = transactions(tmp_path / SESSION)
    usage_tx = [tx for tx in facts if any(tool_usage(f) for f in tx)]
    assert len(usage_tx) == 1, usage_tx
    bound = next(f["usage"] for f in usage_tx[0] if tool_usage(f))
    assert bound["toolStartedId"] == intents["c2"].id
    assert (bound["inputTokens"], bound["outputTokens"], bound["cost"]) == (120, 30, 0.0042)

    # Arguments that do not fit the input schema: an error result, and no call (the
    # tool would have written its marker first thing).
    assert intents["c4"].status == "error"
    assert "seconds" in results["c4"]
    assert not marker.exists()
    refused = next(tx for tx in facts if any(f.get("id") == intents["c4"].id for f in tx))
    assert len(refused) == 2  # intent and result together: provably never ran


def test_http_server_gets_its_header_and_no_secret_reaches_file_cell_or_listing(
    run: Run,
    server: OpenAIServer,
    tmp_path: Path,
    http_server: str,  # noqa: F811 (the fixture imported above)
) -> None:
    servers = {
        "remote": {"url": http_server, "headers": {"Authorization": f"Bearer {HEADER_SECRET}"}},
        "local": stdio_entry(env={"SERVICE_TOKEN": ENV_SECRET}),
    }
    configure(run, servers)
    server.enqueue(
        tool_calls_reply(
            tool_call("h1", "remote__add", {"a": 2, "b": 40}),
            tool_call("s1", "local__env", {"name": "SERVICE_TOKEN"}),
        ),
        text_reply("Added; the token came back redacted."),
    )
    out = run("%%agent\nAdd, and show the token.")
    out += run("%agent mcp")
    out += run("%config TinyAgent")
    out += run("%agent timeline") + run("%agent status")
    assert "✓ remote__add completed" in out and "✓ local__env completed" in out
    results = tool_results(server.requests[1])
    assert results["h1"] == "42"  # the header got through: the server checks it
    assert results["s1"] == "[redacted]"  # the server echoed its env value
    text = (tmp_path / SESSION).read_text()
    for secret in (HEADER_SECRET, ENV_SECRET):
        assert secret not in text and secret not in out
        assert secret not in json.dumps(server.requests[1].body)
    state = load_session(tmp_path / SESSION)
    digests = {a.configuration_digest for a in state.attempts.values()}
    assert all(HEADER_SECRET not in d and ENV_SECRET not in d for d in digests)
    intent = next(i for i in state.tool_intents.values() if i.tool_call_id == "h1")
    assert (intent.tool.name, intent.tool.source) == ("add", "mcp:remote")


def test_agent_mcp_lists_servers_with_state_version_and_tools(run: Run, tmp_path: Path) -> None:
    configure(
        run,
        {
            "tiny": stdio_entry(),
            "ghost": {"command": str(tmp_path / "no-such-server")},
        },
    )
    out = run("%agent mcp")
    lines = out.splitlines()
    head = next(line for line in lines if line.startswith("tiny"))
    assert "running" in head and "stdio" in head and "version 1.2.3" in head
    tools = lines[lines.index(head) + 1]
    assert "tiny__echo" in tools and "tiny__mark_and_sleep" in tools
    ghost = next(line for line in lines if line.startswith("ghost"))
    assert ghost == f"ghost — failed (stdio: {tmp_path / 'no-such-server'})"
    # Why, said once: the line a run would print.
    (why,) = [line for line in lines if "No such file or directory" in line]
    assert why.startswith("MCP server ghost") and "did not start" in why
    # The engine states it; the notebook says how to try again, once.
    assert "%agent" not in why
    assert lines.count("`%agent mcp` tries the servers that did not start again.") == 1


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"command": "/nonexistent/mcp-server-binary"}, "No such file or directory"),
        (stdio_entry("--say", "no licence found", "--exit-at-once"), "no licence found"),
    ],
    ids=["missing command", "exits at once"],
)
def test_a_server_that_fails_to_start_is_one_line_and_the_run_goes_on(
    run: Run, server: OpenAIServer, tmp_path: Path, entry: dict[str, Any], said: str
) -> None:
    configure(run, {"broken": entry, "tiny": stdio_entry()})
    server.enqueue(
        tool_calls_reply(
            tool_call("b1", "bash", {"command": "echo still here"}),
            tool_call("e1", "tiny__echo", {"text": "the other server works"}),
        ),
        text_reply("Both worked."),
    )
    out = run("%%agent\nGo on without the broken server.")
    (problem,) = [line for line in out.splitlines() if "broken" in line]
    assert problem.startswith("MCP server broken") and said in problem
    assert "✓ bash completed" in out and "✓ tiny__echo completed" in out
    assert not any(name.startswith("broken__") for name in tool_names(server.requests[0]))
    state = load_session(tmp_path / SESSION)
    assert [o.status for o in state.operations.values()] == ["completed"]


@pytest.mark.slow
def test_a_server_that_hangs_on_initialize_is_given_up_after_the_start_timeout(
    run: Run, server: OpenAIServer, tmp_path: Path
) -> None:
    configure(run, {"stuck": stdio_entry("--hang")})
    run("%config TinyAgent.mcp_start_timeout = 2.0")
    server.enqueue(
        tool_calls_reply(tool_call("b1", "bash", {"command": "echo still here"})),
        text_reply("Done without it."),
    )
    out = run("%%agent\nGo on without the stuck server.")
    (problem,) = [line for line in out.splitlines() if "stuck" in line]
    assert problem.startswith("MCP server stuck") and "2 s" in problem
    assert "✓ bash completed" in out and "Done without it." in out
    listing = run("%agent mcp")
    assert "stuck — failed" in listing


def test_a_server_killed_mid_run_gives_an_error_result_and_the_next_run_restarts_it(
    run: Run, server: OpenAIServer, tmp_path: Path
) -> None:
    configure(run, {"tiny": stdio_entry()})
    marker = tmp_path / "marker.txt"
    held = threading.Event()
    server.enqueue(
        tool_calls_reply(
            tool_call("m1", "tiny__mark_and_sleep", {"path": str(marker), "seconds": 0})
        ),
        tool_calls_reply(tool_call("e1", "tiny__echo", {"text": "anyone there?"}), hold=held),
        text_reply("The server died."),
    )

    def kill_the_server() -> None:
        server.wait_for_requests(2, timeout=60)
        pid = int(marker.read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), 30, what="the server killed")
        held.set()

    killer = threading.Thread(target=kill_the_server)
    killer.start()
    out = run("%%agent\nCall it twice.")
    killer.join()
    assert "✗ tiny__echo error" in out and "Traceback" not in out
    state = load_session(tmp_path / SESSION)
    assert [o.status for o in state.operations.values()] == ["completed"]

    server.enqueue(
        tool_calls_reply(tool_call("e2", "tiny__echo", {"text": "back again"})),
        text_reply("It is back."),
    )
    out = run("%%agent\nTry again.")
    assert "✓ tiny__echo completed" in out
    assert tool_results(server.requests[-1])["e2"] == "back again"


def test_approve_deny_refuses_an_mcp_call_before_it_runs(
    run: Run, server: OpenAIServer, tmp_path: Path
) -> None:
    configure(run, {"tiny": stdio_entry()})
    marker = tmp_path / "marker.txt"
    server.enqueue(
        tool_calls_reply(
            tool_call("m1", "tiny__mark_and_sleep", {"path": str(marker), "seconds": 0})
        ),
        text_reply("Refused."),
    )
    out = run("%%agent --approve deny\nMark it.")
    assert "⊘ tiny__mark_and_sleep denied" in out
    assert not marker.exists()
    state = load_session(tmp_path / SESSION)
    assert [i.status for i in state.tool_intents.values()] == ["denied"]


def test_tools_option_offers_one_servers_tools_by_pattern_or_name(
    run: Run, server: OpenAIServer
) -> None:
    configure(run, {"tiny": stdio_entry(), "other": stdio_entry()})
    server.enqueue(text_reply("one"), text_reply("two"), text_reply("three"))
    run("%%agent --tools tiny__*\nOnly tiny.")
    run("%%agent --tools read_file,other__echo\nOne of each.")
    run("%%agent\nEverything.")
    only_tiny, mixed, everything = (tool_names(r) for r in server.requests)
    assert only_tiny == {f"tiny__{tool}" for tool in TEST_TOOLS}
    assert mixed == {"read_file", "other__echo"}
    assert {"bash", "tiny__echo", "other__echo"} <= everything


def test_servers_stop_on_agent_new_and_session_on_unload_and_on_a_new_configuration(
    run: Run, server: OpenAIServer, tmp_path: Path
) -> None:
    def started_pid() -> int:
        server.enqueue(tool_calls_reply(tool_call("p", "tiny__pid", {})), text_reply("noted"))
        run("%%agent\nWhich process serves you?")
        return int(tool_results(server.requests[-1])["p"])

    configure(run, {"tiny": stdio_entry()})
    pid = started_pid()
    run("%agent new")
    wait_until(lambda: not pid_alive(pid), 30, what="the server stopped by %agent new")

    pid = started_pid()
    run(f"%agent session {tmp_path / 'other.agent.jsonl'}")
    wait_until(lambda: not pid_alive(pid), 30, what="the server stopped by %agent session")

    pid = started_pid()
    run("%config TinyAgent.mcp_servers = ''")
    wait_until(lambda: not pid_alive(pid), 30, what="the server stopped by a new configuration")

    configure(run, {"tiny": stdio_entry()})
    pid = started_pid()
    run("%unload_ext tiny_agent_nb")
    wait_until(lambda: not pid_alive(pid), 30, what="the server stopped by %unload_ext")
    run("%load_ext tiny_agent_nb")  # the fixture unloads it at the end


def test_the_configuration_digest_covers_where_a_server_is_but_no_env_value(
    run: Run, server: OpenAIServer, tmp_path: Path
) -> None:
    """A digest of a secret would be an oracle for it: two env values, one digest. The
    same tools from a server started otherwise are another configuration."""
    for entry in (
        stdio_entry(env={"SERVICE_TOKEN": ENV_SECRET}),
        stdio_entry(env={"SERVICE_TOKEN": ENV_SECRET[::-1]}),
        stdio_entry("--say", "started otherwise", env={"SERVICE_TOKEN": ENV_SECRET}),
    ):
        configure(run, {"tiny": entry})
        server.enqueue(text_reply("ok"))
        run("%%agent\nHello.")
    state = load_session(tmp_path / SESSION)
    first, second, third = (a.configuration_digest for a in state.attempts.values())
    assert first == second != third
    assert tool_names(server.requests[0]) == tool_names(server.requests[2])
    assert ENV_SECRET not in (tmp_path / SESSION).read_text()


def test_loading_a_session_with_an_open_mcp_intent_starts_no_server(
    shell: InteractiveShell,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # What a kernel killed during an MCP call leaves behind.
    store = SessionStore.open(
        tmp_path / SESSION,
        create=HeaderInit(
            cwd=str(tmp_path),
            provider="openai-compatible",
            model="test/model",
            environment_identity=str(tmp_path),
        ),
    )
    crashed = ScenarioRun(environment=str(tmp_path))
    store.commit(crashed.start("Sleep on it."))
    store.commit(crashed.attempt())
    store.commit(crashed.answer(None, [("nap", "tiny__mark_and_sleep", {"seconds": 600})]))
    tool = ToolIdentity(name="mark_and_sleep", version="1.2.3", source="mcp:tiny")
    store.commit([crashed.intent("nap", tool, {"seconds": 600})])
    store.close()
    # The server would say it started, first thing.
    started = tmp_path / "server-started.txt"
    launcher = f"echo started >> {started}; exec {sys.executable} {TEST_SERVER} stdio"
    servers = {"mcpServers": {"tiny": {"command": "sh", "args": ["-c", launcher]}}}
    monkeypatch.setenv("TINY_AGENT_MCP_SERVERS", json.dumps(servers))

    shell.run_line_magic("load_ext", "tiny_agent_nb")
    loaded = capsys.readouterr().out
    warning = "⚠ tiny__mark_and_sleep · mcp:tiny seconds=600 interrupted — it may have run"
    assert f"{warning}; it was not run again." in loaded
    state = load_session(tmp_path / SESSION)
    assert [i.status for i in state.tool_intents.values()] == ["interrupted"]
    assert not started.exists()

    shell.run_line_magic("agent", "mcp")  # what does start it
    assert "tiny — running" in capsys.readouterr().out
    assert started.read_text() == "started\n"


def test_help_names_agent_mcp_and_a_servers_tools_pattern(run: Run) -> None:
    run("%load_ext tiny_agent_nb")
    helped = run("%agent help")
    assert "%%agent [--model M] [--max-steps N] [--tools a,b,srv__*]" in helped
    assert "`srv__*` is every tool" in helped
    assert "%agent mcp           the MCP servers (TinyAgent.mcp_servers)" in helped
    assert "No MCP servers are configured." in run("%agent mcp")


def test_a_bug_while_starting_the_servers_is_one_line_and_the_run_goes_on(
    run: Run, server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: McpServers, *, retry: bool = True) -> list[str]:
        raise RuntimeError(f"a bug that quotes {ENV_SECRET}")

    monkeypatch.setattr(McpServers, "start", broken)
    configure(run, {"tiny": stdio_entry(env={"SERVICE_TOKEN": ENV_SECRET})})
    server.enqueue(text_reply("Fine without them."))
    out = run("%%agent\nHello.")
    assert out.splitlines()[0] == (
        "tiny-agent-nb: the MCP servers could not be started (RuntimeError: a bug that "
        "quotes [redacted]); this run goes on without their tools, and the next one tries "
        "again."
    )
    assert "Fine without them." in out and ENV_SECRET not in out
    assert not any("__" in name for name in tool_names(server.requests[0]))


def test_a_server_a_call_found_dead_is_restarted_by_the_very_next_start(
    tmp_path: Path,
) -> None:
    """What the next `%%agent` does at once, before the dead server's contexts are left
    (which takes the SDK's process shutdown; under load, seconds)."""
    servers = McpServers(parse_config({"mcpServers": {"tiny": stdio_entry()}}))
    try:
        assert servers.start() == []
        context = ToolContext(workspace=tmp_path.resolve())
        tools = {tool.name: tool for tool in servers.tools()}
        pid = int(tools["tiny__pid"].run({}, context).content)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), 30, what="the server killed")
        dead = tools["tiny__echo"].run({"text": "anyone?"}, context)
        assert dead.is_error and "not running" in dead.content
        assert [s.state for s in servers.status()] == ["failed"]
        assert servers.start() == []
        again = {tool.name: tool for tool in servers.tools()}["tiny__echo"]
        assert again.run({"text": "back"}, context).content == "back"
    finally:
        servers.close()
