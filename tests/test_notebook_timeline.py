"""`%agent timeline` in a real kernel: one display with a display id, updated in place
from the session's commits, that follows this kernel's current session.

What the tests read is what a frontend receives on iopub: `display_data` once, then
`update_display_data` with the same id, each a bundle of text/html (what a saved
notebook keeps, readable with no kernel) and text/plain (terminals, text exports).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.kernel_helpers import Execution, StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply

SESSION = "analysis.agent.jsonl"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers


def clean(run: Execution) -> Execution:
    assert run.error is None, run.error
    assert run.stderr == "", run.stderr
    assert run.reply is not None and run.reply["status"] == "ok", run.reply
    assert "Traceback" not in run.stdout, run.stdout
    return run


def timelines(run: Execution) -> list[tuple[str, str | None, str, dict[str, str]]]:
    """(msg_type, display_id, session id, bundle) of each timeline display the run sent."""
    found = []
    for kind, display_id, data in run.display_messages:
        html = data.get("text/html", "")
        match = re.search(r'class="tan-timeline" data-session="([^"]+)"', html)
        if match:
            found.append((kind, display_id, match.group(1), data))
    return found


def run_statuses(html: str) -> list[str]:
    return re.findall(r'<details class="tan-run" data-run="[^"]+" data-status="([^"]+)"', html)


@pytest.mark.parametrize("switch", ["%agent new", "%agent session other.agent.jsonl"])
def test_timeline_then_a_session_switch_then_a_cell_answers_and_each_timeline_shows_its_session(
    start_kernel: StartKernel, server: OpenAIServer, switch: str
) -> None:
    kernel = start_kernel(shared=True)
    clean(kernel.execute("%load_ext tiny_agent_nb"))
    server.enqueue(text_reply("First answer."))
    clean(kernel.execute("%%agent\nSay something."))

    # The sequence first: the cell after `%agent new` must answer in full.
    opened = clean(kernel.execute("%agent timeline"))
    closing = clean(kernel.execute(switch))
    server.enqueue(text_reply("Second answer."))
    run = kernel.execute("%%agent\nSay more.")
    assert run.error is None, run.error  # was SessionClosedError, in this and every later cell
    clean(run)
    assert any("Second answer." in d.get("text/markdown", "") for d in run.displays)

    shown = timelines(opened)
    assert [kind for kind, *_ in shown] == ["display_data"]
    _, old_id, old_session, bundle = shown[0]
    assert old_id and run_statuses(bundle["text/html"]) == ["completed"]
    # The switch closed the session: the old display drew its last state, saying so,
    # and was left alone by the next cell; a new `%agent timeline` follows the new
    # session, live.
    assert timelines(closing), "the old timeline was not told that its session closed"
    kind, display_id, session, bundle = timelines(closing)[-1]
    assert (kind, display_id, session) == ("update_display_data", old_id, old_session)
    assert run_statuses(bundle["text/html"]) == ["completed"]
    assert "is closed in this kernel" in bundle["text/html"]
    assert "is closed in this kernel" in bundle["text/plain"]
    assert timelines(run) == []

    shown = timelines(clean(kernel.execute("%agent timeline")))
    _, new_id, new_session, bundle = shown[-1]
    assert new_session != old_session and new_id != old_id
    assert run_statuses(bundle["text/html"]) == ["completed"]
    server.enqueue(text_reply("Third answer."))
    updates = timelines(clean(kernel.execute("%%agent\nAnd again.")))
    assert {(kind, display_id, session) for kind, display_id, session, _ in updates} == {
        ("update_display_data", new_id, new_session)
    }
    assert run_statuses(updates[-1][3]["text/html"]) == ["completed", "completed"]


def test_timeline_display_is_rich_html_and_text_updated_in_place_not_a_widget(
    start_kernel: StartKernel, server: OpenAIServer
) -> None:
    """What a saved notebook keeps is the latest HTML and text: it reads with no kernel."""
    kernel = start_kernel(shared=True)
    clean(kernel.execute("%load_ext tiny_agent_nb"))
    shown = timelines(clean(kernel.execute("%agent timeline")))
    _, display_id, _, bundle = shown[0]
    assert WIDGET_MIME not in bundle
    assert "No runs yet." in bundle["text/html"]
    assert bundle["text/plain"].startswith("Agent timeline · ")

    server.enqueue(text_reply("An answer."))
    run = clean(kernel.execute("%%agent\nSay something."))
    updates = timelines(run)
    assert updates and {(k, i) for k, i, _, _ in updates} == {("update_display_data", display_id)}
    # started (a milestone), then finished: the last update is the completed run
    latest = updates[-1][3]
    assert WIDGET_MIME not in latest
    assert run_statuses(latest["text/html"]) == ["completed"]
    assert "completed" in latest["text/plain"] and "Say something." in latest["text/plain"]
    assert "<IPython" not in latest["text/plain"]


def test_a_second_kernel_reads_the_session_read_only_and_still_may_not_write(
    start_kernel: StartKernel, workspace: Path, server: OpenAIServer
) -> None:
    first = start_kernel(shared=True)
    clean(first.execute("%load_ext tiny_agent_nb"))
    server.enqueue(text_reply("From the first kernel."))
    clean(first.execute("%%agent\nSay something."))
    session = workspace / SESSION
    before = session.read_bytes()

    second = start_kernel(shared=True)
    clean(second.execute("%load_ext tiny_agent_nb"))
    label = f"read-only: process {first.pid} writes this session"

    status = clean(second.execute("%agent status")).stdout
    assert f"session  {session} ({label})" in status
    assert "runs     1;" in status
    assert clean(second.execute("%agent session")).stdout == f"{session} ({label})\n"
    usage = clean(second.execute("%agent usage")).stdout
    assert usage.startswith(f"({label})\n") and "completed" in usage
    shown = timelines(clean(second.execute("%agent timeline")))
    _, display_id, _, bundle = shown[0]
    assert label in bundle["text/html"] and label in bundle["text/plain"]
    assert run_statuses(bundle["text/html"]) == ["completed"]

    # Writing is still refused, with the existing message, and nothing is written.
    for code in ("%%agent\nAre you there?", "%agent resume", "%agent new"):
        out = clean(second.execute(code)).stdout
        assert f"is in use by process {first.pid}" in out, (code, out)
    assert session.read_bytes() == before
    assert len(server.requests) == 1

    # The read-only view catches up after the reader's next cell.
    server.enqueue(text_reply("Again from the first kernel."))
    clean(first.execute("%%agent\nSay more."))
    later = timelines(clean(second.execute("1 + 1")))
    assert [(k, i) for k, i, _, _ in later] == [("update_display_data", display_id)]
    assert run_statuses(later[-1][3]["text/html"]) == ["completed", "completed"]
