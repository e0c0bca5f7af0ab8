"""What power mode's commit path computes faster must still be what docs/spec.md defines.

`replay_key` hashes the arguments' canonical JSON followed by a tail encoded once per
(tool, workspace) pair (register row "replay-key-tail", docs/benchmarks.md): the digest
must stay docs/session-format.md §3.3's digest of `{"tool", "arguments",
"environmentIdentity"}`, for every tool and workspace met in any order, and a value the
format cannot hold must still fail.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tiny_agent_nb.session import InvalidTransactionError, ToolIdentity, replay_key
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.session._canonical import sha256_digest

TOOLS = [
    ToolIdentity(name="read_file", version="1", source="builtin"),
    ToolIdentity(name="read_file", version="2", source="builtin"),
    ToolIdentity(name="read_file", version="1", source="mcp:files"),
    ToolIdentity(name="bash", version="1", source="builtin"),
    ToolIdentity(name='ünï\tcode"\\', version="é", source="mcp:sérveur"),
]
WORKSPACES = ["/work/a", "/work/b", '/tmp/é space/"q"', "C:\\\\repo", "/日本/repo", ""]
ARGUMENTS: list[dict[str, Any]] = [
    {},
    {"path": "src/pkg/module_1.py", "offset": 0, "limit": 200},
    {"limit": 200, "offset": 0, "path": "src/pkg/module_1.py"},  # the same, other order
    {"command": "ls -la\n", "timeout": 1.5, "env": {"Z": "1", "A": None}},
    {"ключ": ["é", {"b": [1, 2.25, True, False, None]}, -(10**30)], "a\u2028b": "\u00e9\U0001f600"},
]


def spec_key(tool: ToolIdentity, arguments: dict[str, Any], workspace: str) -> str:
    """§3.3 as written: the digest of the whole object's canonical JSON."""
    return sha256_digest(
        {"tool": tool.model_dump(), "arguments": arguments, "environmentIdentity": workspace}
    )


def test_replay_key_is_the_digest_of_the_spec_object_for_every_tool_and_workspace() -> None:
    # Interleaved so each (tool, workspace) tail is met after others were encoded: a tail
    # kept for the wrong pair gives a wrong key here.
    for arguments in ARGUMENTS:
        for workspace in WORKSPACES:
            for tool in TOOLS:
                assert replay_key(tool, arguments, workspace) == spec_key(
                    tool, arguments, workspace
                ), (tool, arguments, workspace)


def test_replay_key_differs_for_each_workspace_of_one_tool() -> None:
    tool, arguments = TOOLS[0], ARGUMENTS[1]
    keys = {replay_key(tool, arguments, workspace) for workspace in WORKSPACES}
    assert len(keys) == len(WORKSPACES)


def test_equal_tools_built_apart_share_a_key() -> None:
    one = ToolIdentity(name="grep", version="3", source="builtin")
    other = ToolIdentity(name="grep", version="3", source="builtin")
    assert one is not other
    assert replay_key(one, {"q": "x"}, "/w") == replay_key(other, {"q": "x"}, "/w")


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"x": math.nan}, ValueError),
        ({"x": {1, 2}}, TypeError),
        ({"x": "\ud800"}, UnicodeEncodeError),
        ({1: "a", "b": 2}, TypeError),  # sort_keys cannot order an int and a str
    ],
)
def test_arguments_the_format_cannot_hold_still_fail(
    arguments: dict[Any, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        replay_key(TOOLS[0], arguments, "/w")
    with pytest.raises(InvalidTransactionError, match="toolStarted arguments"):
        f.tool_started(
            "op",
            "attempt",
            "call",
            tool=TOOLS[0],
            arguments=arguments,
            replay_policy="never",
            environment_identity="/w",
        )


def test_a_workspace_path_that_is_no_text_fails_every_time() -> None:
    # A lone surrogate cannot be UTF-8: refused, and never remembered as a good tail.
    for _ in range(2):
        with pytest.raises(UnicodeEncodeError):
            replay_key(TOOLS[0], {}, "/w/\udcff")
