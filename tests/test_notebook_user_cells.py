"""The user's cells as context, in a real kernel: each `%%agent` prompt carries the cells
the user ran since the previous agent cell (code, and the error with the user's line),
kept in its user entry, so that a new kernel sends the same conversation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_notebook_kernel import assert_clean, load

from tiny_agent_nb.provider import messages
from tiny_agent_nb.session import UserEntry, load_session

from helpers.kernel_helpers import Kernel, StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

SESSION = "analysis.agent.jsonl"
KEY = "sk-user-cells-SECRET-0123456789"
PARSE = "import json\n\ndef parse(text):\n    return json.loads(text)"
FAILING = 'records = parse("{bad json")'
MESSAGE = "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
EXPECTED = f"""{messages.USER_CELLS_START}
In [2]:
```python
{PARSE}
```
In [3]:
```python
{FAILING}
```
→ json.decoder.JSONDecodeError: {MESSAGE} (at In [2], line 4: return json.loads(text))
{messages.USER_CELLS_END}"""


def user_entries(session: Path) -> list[UserEntry]:
    state = load_session(session)
    return [e.entry for e in state.entries.values() if isinstance(e.entry, UserEntry)]


def run(kernel: Kernel, code: str) -> None:
    """A cell of the user's; an error in it is the user's (not the test's) concern."""
    kernel.execute(code)


def test_a_prompt_carries_the_cells_and_the_error_since_the_previous_agent_cell(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(text_reply("json.loads needs double quotes."), text_reply("Nothing new."))
    kernel = start_kernel(shared=True)
    load(kernel)
    run(kernel, PARSE)
    failed = kernel.execute(FAILING)
    assert failed.error is not None and failed.error["ename"] == "JSONDecodeError"
    assert_clean(kernel.execute("%%agent\nWhy did it fail?"))
    assert_clean(kernel.execute("%agent status"))  # an agent cell: not the user's context
    assert_clean(kernel.execute("%%agent\nAnything else?"))

    first, second = (r.body["messages"] for r in server.requests)
    assert first[-1] == {"role": "user", "content": f"{EXPECTED}\n\nWhy did it fail?"}
    print("request body after a failing cell:\n" + json.dumps(server.requests[0].body, indent=1))
    # Nothing ran between the two agent cells: the second prompt comes alone.
    assert second[-1] == {"role": "user", "content": "Anything else?"}
    assert second[1] == first[-1]  # the history is sent as it was

    entries = user_entries(workspace / SESSION)
    assert [(e.message.content, e.userCells) for e in entries] == [
        ("Why did it fail?", EXPECTED),
        ("Anything else?", None),
    ]

    # A new kernel sends the same conversation: the cells are in the file.
    kernel.shutdown()
    server.enqueue(text_reply("Same context."))
    again = start_kernel(shared=True)
    load(again)
    assert_clean(again.execute("%%agent\nAnd now?"))
    resent = server.requests[2].body["messages"]
    assert resent[1 : len(second)] == second[1:]
    # the new kernel's notice leads the prompt's turn; no cells ran in it
    notice, _, prompt = resent[-1]["content"].partition("\n\n")
    assert notice.startswith("[Kernel restarted]") and prompt == "And now?"


def test_secrets_are_redacted_and_a_budget_of_zero_sends_no_cells(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(text_reply("ok"), text_reply("ok"))
    kernel = start_kernel(shared=True, extra={"TINY_AGENT_API_KEY": KEY})
    load(kernel)
    run(kernel, f"token = '{KEY}'\nprint('\\x1b[31mred\\x1b[0m')")
    run(kernel, "raise ValueError('\\x1b[1mbold\\x1b[0m ' + token)")
    assert_clean(kernel.execute("%%agent\nLook."))
    sent = server.requests[0].body["messages"][-1]["content"]
    assert KEY not in sent and KEY not in (workspace / SESSION).read_text()
    assert "token = '[redacted]'" in sent
    assert "→ ValueError: bold [redacted] (at In [3], line 1: " in sent
    assert "\x1b" not in sent

    run(kernel, "%config TinyAgent.user_cells_chars = 0")
    run(kernel, "x = 1")
    assert_clean(kernel.execute("%%agent\nAgain."))
    assert server.requests[1].body["messages"][-1]["content"] == "Again."


# An exception whose message raises KeyboardInterrupt when anyone but IPython reads it.
SPITEFUL = """import sys
class Spiteful(Exception):
    def __str__(self):
        if "_user_cells" in sys._getframe(1).f_code.co_filename:
            raise KeyboardInterrupt
        return "as IPython shows it"
raise Spiteful()"""


def test_an_error_whose_message_raises_stays_the_cells_own(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    server.enqueue(text_reply("ok"))
    kernel = start_kernel(shared=True)
    load(kernel)
    failed = kernel.execute(SPITEFUL)
    assert failed.error is not None and failed.error["ename"] == "Spiteful"
    assert "Error in callback" not in failed.stdout + failed.stderr
    assert_clean(kernel.execute("%%agent\nWhy?"))
    sent = server.requests[0].body["messages"][-1]["content"]
    assert "→ __main__.Spiteful: (its message could not be read) (at In [2], line 7" in sent


def test_the_newest_cells_fit_the_budget_and_the_older_are_counted(
    start_kernel: StartKernel, server: OpenAIServer
) -> None:
    server.enqueue(text_reply("ok"))
    kernel = start_kernel(shared=True)
    load(kernel)
    run(kernel, "%config TinyAgent.user_cells_chars = 400")
    for n in range(6):
        run(kernel, f"step_{n} = {n}  # {'x' * 60}")
    run(kernel, "1 / 0")
    assert_clean(kernel.execute("%%agent\nWhat happened?"))
    sent: Any = server.requests[0].body["messages"][-1]["content"]
    cells, _, prompt = sent.partition("\n\n")
    assert prompt == "What happened?"
    assert len(cells) <= 400
    assert cells.splitlines()[1] == "[6 earlier cell(s) left out]"
    assert "step_5 = 5" in cells and "step_4" not in cells
    assert cells.endswith(
        "→ ZeroDivisionError: division by zero (at In [9], line 1: 1 / 0)\n"
        + messages.USER_CELLS_END
    )
