"""The kernel notice (docs/spec.md §9): once the conversation goes on in another kernel,
its first run tells the model, once, that the kernel restarted, what the earlier
`python` calls defined and that the user's variables are gone; the file holds the notice
as it was sent.

The loop runs against the loopback OpenAI server; kernels are `kernelOpened` records
committed as a notebook commits them, told apart by their pid (another process).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import AgentLoop, LoopConfig
from tiny_agent_nb.agent._kernel_notice import NAMES_SHOWN, defined_names, kernel_notice
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import HeaderInit, KernelNotice, SessionStore, load_session
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.tools import ToolContext, builtin_registry

from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

NOTICE = "[Kernel restarted]"


# ---------------------------------------------------------------- the names, from code


@pytest.mark.parametrize(
    ("code", "names"),
    [
        ("x = 1\ny, (z, *rest) = 2, (3, 4, 5)", ["x", "y", "z", "rest"]),
        ("a = b = 0\nc += 1\nd: int = 2\ne: int", ["a", "b", "c", "d"]),
        ("obj.attr = 1\nitems[0] = 2", []),
        (
            "import numpy as np, os.path\nfrom json import loads as L, dumps",
            ["np", "os", "L", "dumps"],
        ),
        ("from math import *", []),
        (
            "def load(path):\n    inner = 1\n    return inner\nclass Model:\n    field = 2",
            ["load", "Model"],
        ),
        ("async def fetch():\n    pass", ["fetch"]),
        (
            "for i, row in enumerate([]):\n    total = row\nelse:\n    done = 1",
            ["i", "row", "total", "done"],
        ),
        (
            "with open('f') as fh, open('g') as (a, b):\n    text = fh.read()",
            ["fh", "a", "b", "text"],
        ),
        ("if True:\n    p = 1\nelse:\n    q = 2\nwhile False:\n    r = 3", ["p", "q", "r"]),
        (
            "try:\n    t = 1\nexcept Exception as err:\n    u = 2\nfinally:\n    v = 3",
            ["t", "u", "v"],
        ),
        ("print(w := 5)\n[(k := j) for j in range(3)]", ["w", "k"]),
        # A value is evaluated before the targets it is bound to, an iterable before the
        # loop's target: a walrus in either defines its name first.
        ("x = (y := 1)\nz += (n := 2)", ["y", "x", "n", "z"]),
        ("for i in (items := []):\n    pass", ["items", "i"]),
        ("f = lambda: (hidden := 1)", ["f"]),
        (
            "match cmd:\n    case [first, *others]:\n        m = 1\n"
            "    case {'k': val, **more}:\n        pass\n"
            "    case Point(x=px) as pt:\n        pass",
            ["first", "others", "m", "more", "val", "pt", "px"],
        ),
        ("gone = 1\nkept = 2\ndel gone", ["kept"]),
        ("this is not python (", []),
    ],
)
def test_the_names_code_defines_are_read_from_it_without_running_it(
    code: str, names: list[str]
) -> None:
    assert defined_names([code]) == names


def test_names_keep_the_order_they_were_first_defined_in_across_calls() -> None:
    assert defined_names(["df = 1\nnp = 2", "df = 3\nmodel = 4", "del np"]) == ["df", "model"]


def test_code_that_would_run_is_only_parsed() -> None:
    marker = "import os; os.environ['TINY_AGENT_NOTICE_RAN'] = '1'\nran = True"
    assert defined_names([marker]) == ["os", "ran"]
    import os  # noqa: PLC0415

    assert "TINY_AGENT_NOTICE_RAN" not in os.environ


# ---------------------------------------------------------------- the loop


class Harness:
    """A session on disk and the loop of the kernel that writes it now."""

    def __init__(self, server: OpenAIServer, workspace: Path) -> None:
        self.server, self.workspace = server, workspace
        self.path = workspace / "nb.agent.jsonl"
        init = HeaderInit(
            cwd=str(workspace),
            provider="openrouter",
            model="test/model",
            environment_identity=str(workspace),
        )
        self.store = SessionStore.open(self.path, create=init)
        self.namespace: dict[str, object] = {}

    def kernel(self, pid: int) -> str:
        """A kernel (another process for another pid) opens the session."""
        opened = f.NewFact(
            f.KernelOpened(
                pid=pid,
                host="laptop",
                startedAt=1_787_000_000_000 + pid,
                kernelId=None,
                notebook=None,
            )
        )
        return self.store.commit([opened])[0].id

    def loop(self) -> AgentLoop:
        config = ProviderConfig(model="test/model", base_url=self.server.base_url)
        return AgentLoop(
            self.store,
            Provider(config),
            builtin_registry(),
            ToolContext(workspace=self.workspace, namespace=self.namespace),
            LoopConfig(config, approval="auto"),
        )

    def run(self, prompt: str, *replies: Any) -> list[dict[str, Any]]:
        """Run `prompt`; the messages of its first request."""
        self.server.enqueue(*(replies or (text_reply("ok"),)))
        first = len(self.server.requests)
        loop = self.loop()
        try:
            assert loop.run(prompt).outcome == "completed"
        finally:
            loop.close()
        messages: list[dict[str, Any]] = self.server.requests[first].body["messages"]
        return messages

    def python(self, prompt: str, code: str) -> list[dict[str, Any]]:
        call = tool_call(f"call_{len(self.server.requests)}", "python", {"code": code})
        return self.run(prompt, tool_calls_reply(call), text_reply("done"))


@pytest.fixture
def harness(strict_server: OpenAIServer, tmp_path: Path) -> Iterator[Harness]:
    # As the strictest chat templates do (Gemma's, Mistral's): no two user turns in a row.
    strict_server.turns = "alternating"
    h = Harness(strict_server, tmp_path)
    yield h
    h.store.close()


def notices(messages: list[dict[str, Any]]) -> list[str]:
    """The notices the messages hold: a user message's first paragraph (a run's notice
    shares its prompt's turn), or the whole of one (a resume's)."""
    return [
        m["content"].partition("\n\n")[0]
        for m in messages
        if m["role"] == "user" and m["content"].startswith(NOTICE)
    ]


def test_the_first_run_in_a_new_kernel_is_told_once_what_is_gone(harness: Harness) -> None:
    harness.kernel(100)
    harness.python("Load the data", "df = [1, 2]\nimport numpy as np\ndef clean(x):\n    return x")
    assert harness.namespace["df"] == [1, 2]
    assert notices(harness.run("Go on")) == []  # the same kernel: nothing to tell

    harness.kernel(200)  # the kernel restarted
    first = harness.run("What is df?")
    (notice,) = notices(first)
    assert "the names earlier `python` calls defined (df, np, clean)" in notice
    assert "the user's variables" in notice and "started 2026-08-17" in notice
    # Told before the prompt, in its user turn (never two user turns in a row), after
    # everything the model knew.
    assert first[-1]["content"] == f"{notice}\n\nWhat is df?"
    assert first[-2]["role"] == "assistant"
    # Once: the next request and the next run carry the same notice, in the same place.
    second = harness.run("And now?")
    assert notices(second) == [notice] and second[: len(first)] == first

    state = load_session(harness.path)
    kept = [e.entry for e in state.entries.values() if isinstance(e.entry, KernelNotice)]
    assert [k.message.content for k in kept] == [notice]  # what the model saw is in the file


def test_two_restarts_without_a_run_between_give_one_notice(harness: Harness) -> None:
    harness.kernel(100)
    harness.python("Define", "a = 1")
    harness.kernel(200)
    third = harness.kernel(300)
    (notice,) = notices(harness.run("Hi"))
    assert "(a)" in notice
    state = load_session(harness.path)
    assert [k.notice_id is not None for k in state.kernels.values()] == [False, False, True]
    assert list(state.kernels)[-1] == third


def test_the_same_process_reopening_the_session_is_no_restart(harness: Harness) -> None:
    harness.kernel(100)
    harness.python("Define", "a = 1")
    harness.kernel(100)  # e.g. `%agent session` away and back: the variables are there
    assert notices(harness.run("Hi")) == []


def test_a_kernel_that_only_opened_the_session_between_changes_nothing(harness: Harness) -> None:
    """A -> B (no run) -> A: what A's python calls defined is still in A."""
    harness.kernel(100)
    harness.python("Define", "a = 1")
    harness.kernel(200)
    harness.kernel(100)
    assert notices(harness.run("Hi")) == []


def test_a_session_written_before_kernels_were_recorded_gets_the_notice(
    harness: Harness,
) -> None:
    harness.python("Define", "legacy = 1")  # a writer that records no kernel
    assert notices(harness.run("Again")) == []
    harness.kernel(100)
    (notice,) = notices(harness.run("Hi"))
    assert "(legacy)" in notice


def test_a_new_session_needs_no_notice(harness: Harness) -> None:
    harness.kernel(100)
    harness.kernel(200)
    assert notices(harness.run("Hi")) == []


def test_each_notice_lists_what_was_defined_since_the_last_one(harness: Harness) -> None:
    harness.kernel(100)
    harness.python("One", "first = 1")
    harness.kernel(200)
    harness.python("Two", "second = 2")
    harness.kernel(300)
    *_, notice = notices(harness.run("Three"))
    assert "(second)" in notice and "first" not in notice


def test_a_restart_without_python_calls_says_only_the_users_variables_are_gone(
    harness: Harness,
) -> None:
    harness.kernel(100)
    harness.run("Hi")
    harness.kernel(200)
    (notice,) = notices(harness.run("Hi again"))
    assert "python" not in notice and "the user's variables" in notice


def test_a_long_list_of_names_is_cut_and_counted(harness: Harness) -> None:
    harness.kernel(100)
    harness.python("Many", "\n".join(f"v{i} = {i}" for i in range(NAMES_SHOWN + 5)))
    harness.kernel(200)
    (notice,) = notices(harness.run("Hi"))
    assert f"v{NAMES_SHOWN - 1} and 5 more)" in notice and f"v{NAMES_SHOWN}," not in notice


def test_a_resume_in_a_new_kernel_is_told_after_the_interrupted_calls(
    harness: Harness,
) -> None:
    harness.kernel(100)
    run_id = "resumed"
    call = tool_call("call_x", "python", {"code": "state = 1\nraise KeyboardInterrupt"})
    harness.server.enqueue(tool_calls_reply(call))
    loop = harness.loop()
    with pytest.raises(KeyboardInterrupt):
        loop.run(run_id)
    loop.close()
    harness.kernel(200)
    harness.server.enqueue(text_reply("Checked."))
    first = len(harness.server.requests)
    loop = harness.loop()
    assert loop.resume().outcome == "completed"
    loop.close()
    messages = harness.server.requests[first].body["messages"]
    assert messages[-2]["role"] == "tool" and messages[-2]["tool_call_id"] == "call_x"
    assert messages[-1]["content"].startswith(NOTICE) and "(state)" in messages[-1]["content"]


def test_a_denied_python_call_defined_nothing(tmp_path: Path, server: OpenAIServer) -> None:
    harness = Harness(server, tmp_path)
    harness.kernel(100)
    call = tool_call("call_d", "python", {"code": "never = 1"})
    server.enqueue(tool_calls_reply(call), text_reply("ok"))
    config = ProviderConfig(model="test/model", base_url=server.base_url)
    loop = AgentLoop(
        harness.store,
        Provider(config),
        builtin_registry(),
        ToolContext(workspace=tmp_path, namespace={}),
        LoopConfig(config, approval="deny"),
    )
    loop.run("Try")
    loop.close()
    harness.kernel(200)
    notice = kernel_notice(harness.store.load())
    assert notice is not None
    assert "never" not in notice.body.message.content  # type: ignore[union-attr]
    harness.store.close()
