"""A rewind in a real kernel over real files (docs/spec.md §17): the agent's write_file,
edit_file and bash calls, the plan, the Confirm button, a user's edit as a conflict,
--force, and --undo after a kernel restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tiny_agent_nb.session import load_session

from helpers.kernel_helpers import StartKernel, start_kernel, workspace
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply
from helpers.polling import wait_until
from helpers.widget_frontend import WidgetFrontend

__all__ = ["start_kernel", "workspace"]  # the fixtures, from kernel_helpers

BINARY = bytes(range(256)) * 3


def test_rewind_restores_the_agents_files_asks_first_and_undoes_after_a_restart(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    notes, data, gone = workspace / "notes.md", workspace / "data.bin", workspace / "gone.txt"
    created = workspace / "new" / "created.txt"
    notes.write_bytes(b"first\n")
    notes.chmod(0o640)
    data.write_bytes(BINARY)
    gone.write_bytes(b"the user's\n")
    server.enqueue(
        tool_calls_reply(
            tool_call("c1", "write_file", {"path": "notes.md", "content": "first\nsecond\n"}),
            tool_call("c2", "write_file", {"path": "data.bin", "content": "text now\n"}),
            tool_call("c3", "write_file", {"path": "new/created.txt", "content": "made\n"}),
        ),
        tool_calls_reply(
            tool_call(
                "c4", "edit_file", {"path": "notes.md", "old_string": "second", "new_string": "2"}
            ),
            tool_call("c5", "bash", {"command": "rm gone.txt"}),
        ),
        text_reply("Done."),
    )
    kernel = start_kernel()
    ui = WidgetFrontend(kernel)
    ui.finish(ui.send("%load_ext tiny_agent_nb"))
    ui.finish(ui.send("%%agent\nRewrite my files."))
    assert notes.read_bytes() == b"first\n2\n" and not gone.exists()
    created.write_bytes(b"the user's edit\n")  # after the agent's write: a conflict

    asking = ui.finish(ui.send("%agent rewind 1"))
    plan = asking.text()
    assert "notes.md: restore 6 bytes (8 bytes now; +0 -1 lines)" in plan
    assert "data.bin: restore 768 bytes (binary; 9 bytes now)" in plan
    assert "new/created.txt: changed since the agent's last change" in plan
    assert "bash: rm gone.txt" in plan
    assert notes.read_bytes() == b"first\n2\n"  # nothing before the click
    # A saved notebook says what was asked, as text, while the buttons wait.
    asked = "○ asked to confirm the rewind, not answered here: nothing was changed"
    assert f"{asked} (`%agent rewind 1 --yes` carries it out)" in asking.text()
    assert "object at 0x" not in asking.text()
    ui.click(ui.wait_for_button("Confirm the rewind"))
    ui.until(lambda: "✓ rewind confirmed by you" in asking.text(), "the answer kept")
    ui.until(lambda: "Rewound:" in asking.text(), "the rewind carried out")
    assert asked not in asking.text()
    assert notes.stat().st_mode & 0o7777 == 0o640
    assert data.read_bytes() == BINARY
    assert created.read_bytes() == b"the user's edit\n"  # never clobbered
    assert not gone.exists()  # bash's effect stays, as the plan said

    cancelled = ui.finish(ui.send("%agent rewind 1 --force"))
    ui.click(ui.wait_for_button("Cancel"))
    ui.until(lambda: "Cancelled. Nothing has changed yet." in cancelled.text(), "the cancel")
    assert "✗ rewind cancelled by you" in cancelled.text()
    assert created.read_bytes() == b"the user's edit\n"

    forced = kernel.execute("%agent rewind 1 --yes --force").stdout
    assert "restored new/created.txt" in forced
    assert not created.exists()

    kernel.restart()
    assert kernel.execute("%load_ext tiny_agent_nb").error is None
    undone = kernel.execute("%agent rewind --undo --yes").stdout
    assert "Undo rewind 3" in undone
    assert created.read_bytes() == b"the user's edit\n"
    state = wait_until(lambda: load_session(workspace / "analysis.agent.jsonl"), what="session")
    kinds = [op.kind for op in state.operations.values()]
    assert kinds == ["run", "rewind", "rewind", "rewind"]


CHILD = Path(__file__).parent / "children" / "rewind_kill.py"


def test_a_rewind_killed_mid_way_is_reported_by_the_next_load_and_finished(
    start_kernel: StartKernel, server: OpenAIServer, workspace: Path
) -> None:
    names = ("a.txt", "b.txt", "c.txt")
    for name in names:
        (workspace / name).write_bytes(b"mine\n")
    server.enqueue(
        tool_calls_reply(
            *(tool_call(f"c{n}", "write_file", {"path": n, "content": "agent\n"}) for n in names)
        ),
        text_reply("Done."),
    )
    kernel = start_kernel()
    assert kernel.execute("%load_ext tiny_agent_nb").error is None
    assert kernel.execute("%%agent\nWrite them.").error is None
    kernel.shutdown()  # the session's lock goes with it
    session = str(workspace / "analysis.agent.jsonl")
    child = subprocess.run(
        [sys.executable, str(CHILD), session, str(workspace), "-", "1"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert [(workspace / n).read_bytes() for n in names] == [b"mine\n", b"agent\n", b"agent\n"]
    kernel = start_kernel(shared=True)
    report = kernel.execute("%load_ext tiny_agent_nb").stdout
    assert "The previous kernel stopped during a rewind to before run 1:" in report
    assert "restored: a.txt" in report and "not restored: b.txt" in report
    assert "`%agent rewind 1` finishes it" in report
    assert "c.txt" not in report  # never reached: no record, nothing done
    finished = kernel.execute("%agent rewind 1 --yes").stdout
    assert "Rewound: 2 file(s) restored." in finished
    assert [(workspace / n).read_bytes() for n in names] == [b"mine\n"] * 3
