"""No stale or noisy outputs, in real kernels: a clean shutdown draws nothing (a display
updated as JupyterLab closes a notebook makes it ask "Save your work?"), a timeline
closed by a session switch says so without a raw id, and a timeline a dead kernel left
showing a run open is marked superseded by the kernel that settles that run.

The marking is a stylesheet a later output carries (tests/test_browser_controls.py shows
it applied in JupyterLab); here the kernels' messages are read.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from queue import Empty

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

TIMELINE = re.compile(r'<div class="tan-timeline" data-session="([^"]+)"([^>]*)>')


def test_a_clean_shutdown_draws_no_display_again(
    start_kernel: StartKernel, server: OpenAIServer
) -> None:
    kernel = start_kernel(shared=True)
    kernel.execute("%load_ext tiny_agent_nb")
    server.enqueue(text_reply("An answer."))
    kernel.execute("%%agent\nSay something.")
    shown = kernel.execute("%agent timeline")
    assert shown.display_messages, "no timeline shown"

    kernel.kc.shutdown()
    sent = []
    deadline = time.monotonic() + 30
    while kernel.is_alive() and time.monotonic() < deadline:
        try:
            sent.append(kernel.kc.get_iopub_msg(timeout=0.2)["header"]["msg_type"])
        except Empty:
            continue
    assert not kernel.is_alive(), "the kernel did not shut down"
    assert "update_display_data" not in sent, sent


def test_a_timeline_closed_by_a_session_switch_names_no_session_id(
    start_kernel: StartKernel,
) -> None:
    kernel = start_kernel(shared=True)
    kernel.execute("%load_ext tiny_agent_nb")
    opened = kernel.execute("%agent timeline")
    found = TIMELINE.search(opened.displays[-1]["text/html"])
    assert found is not None
    session = found.group(1)
    switched = kernel.execute("%agent new")
    updates = [data for kind, _, data in switched.display_messages if "tan-timeline" in str(data)]
    assert updates, "the timeline was not told its session closed"
    for shown in (updates[-1]["text/plain"], updates[-1]["text/html"]):
        assert "this session is closed in this kernel" in shown
        assert session not in shown.replace(f'data-session="{session}"', "")


def test_the_next_kernel_marks_a_timeline_a_dead_kernel_left_open_superseded(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    first = start_kernel(shared=True)
    first.execute("%load_ext tiny_agent_nb")
    shown = first.execute("%agent timeline")
    display_id = shown.display_messages[-1][1]
    hold = threading.Event()
    server.enqueue(
        tool_calls_reply(tool_call("c1", "list_files", {"path": "."})),
        text_reply("Never sent.", hold=hold),
    )
    first.send("%%agent\nList the files.")
    server.wait_for_requests(2, timeout=30)  # the run is open, its second step in flight
    deadline = time.monotonic() + 30
    last_html = ""
    while 'data-status="open"' not in last_html and time.monotonic() < deadline:
        try:
            msg = first.kc.get_iopub_msg(timeout=0.2)
        except Empty:
            continue
        transient = msg["content"].get("transient") or {}
        if transient.get("display_id") == display_id:
            last_html = msg["content"]["data"]["text/html"]
    first.sigkill()
    hold.set()
    left = TIMELINE.search(last_html)
    assert left is not None and "data-open" in left.group(2), last_html
    drawn_by = re.search(r'data-drawn-by="([^"]+)"', left.group(2))
    assert drawn_by is not None
    assert '<div class="tan-note tan-superseded" hidden' in last_html  # hidden until marked

    second = start_kernel(shared=True)
    loaded = second.execute("%load_ext tiny_agent_nb")
    assert "The previous kernel stopped during a run" in loaded.stdout
    session = left.group(1)
    superseding = [d for d in loaded.displays if "tan-superseding" in d.get("text/html", "")]
    assert len(superseding) == 1 and superseding[0]["text/plain"] == ""  # no visible text
    rules = [d["text/html"] for d in superseding]
    rule = re.search(
        r'\.tan-timeline\[data-session="([^"]+)"\]\[data-open\]:not\(\[data-drawn-by="([^"]+)"\]\)'
        r" \.tan-superseded\{display:block!important\}",
        rules[0],
    )
    assert rule is not None, rules[0]
    assert rule.group(1) == session
    assert rule.group(2) != drawn_by.group(1)  # the new kernel's: it marks the dead one's

    # A timeline the new kernel draws carries the same mark, and is itself not marked.
    redrawn = second.execute("%agent timeline").displays[-1]["text/html"]
    assert rule.group(0) in redrawn
    mine = TIMELINE.search(redrawn)
    assert mine is not None and "data-open" not in mine.group(2)
    assert f'data-drawn-by="{rule.group(2)}"' in mine.group(2)
