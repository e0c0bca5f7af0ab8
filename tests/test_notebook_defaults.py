"""Each default lives in one place: the loop's, the provider's and the MCP servers' own
constants, which `TinyAgent`'s traits take as theirs, and the README's trait table says."""

from __future__ import annotations

import re
from pathlib import Path

from tiny_agent_nb.agent import DEFAULT_CONTEXT_WINDOW, LoopConfig
from tiny_agent_nb.mcp import DEFAULT_CALL_TIMEOUT, DEFAULT_START_TIMEOUT
from tiny_agent_nb.notebook import TinyAgent
from tiny_agent_nb.provider import ProviderConfig
from tiny_agent_nb.session import FileStore

README = Path(__file__).resolve().parent.parent / "README.md"
ROW = re.compile(r"^\| `TinyAgent\.(?P<name>\w+)` \|[^|]*\| (?P<default>[\d.]+)\b[^|]*\|")


def test_the_traits_default_to_what_the_engine_defaults_to() -> None:
    traits = TinyAgent()
    loop = LoopConfig(ProviderConfig("m"))
    assert traits.max_steps == loop.max_steps
    assert traits.compact_threshold == loop.compact_threshold
    assert traits.keep_tail_tokens == loop.keep_tail_tokens
    assert traits.approve == loop.approval
    assert traits.request_timeout == ProviderConfig(base_url="", model="m").read_timeout
    assert (traits.mcp_start_timeout, traits.mcp_call_timeout) == (
        DEFAULT_START_TIMEOUT,
        DEFAULT_CALL_TIMEOUT,
    )
    assert str(DEFAULT_CONTEXT_WINDOW) in TinyAgent.context_window.help
    assert (traits.file_history_max_file, traits.file_history_max_session) == (
        FileStore.MAX_FILE,
        FileStore.MAX_SESSION,
    )


def test_the_readmes_trait_table_says_the_defaults() -> None:
    traits = TinyAgent()
    rows = [ROW.match(line) for line in README.read_text(encoding="utf-8").splitlines()]
    numbers = {m["name"]: float(m["default"]) for m in rows if m is not None}
    assert {"max_steps", "compact_threshold", "keep_tail_tokens", "mcp_call_timeout"} <= set(
        numbers
    )
    for name, number in numbers.items():
        assert getattr(traits, name) == number, name
