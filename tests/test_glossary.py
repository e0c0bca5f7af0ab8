"""One word per concept and one money format on every surface (docs/glossary.md): the
timeline's HTML, `tiny-agent-nb timeline` and `%agent usage` read the same for the same
session."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tiny_agent_nb.cli import main
from tiny_agent_nb.session import HeaderInit, SessionStore, ToolIdentity
from tiny_agent_nb.session import facts as f

from helpers.ipython_shell import fresh_shell
from helpers.scenario import BASH, Run

GLOSSARY = Path(__file__).resolve().parent.parent / "docs" / "glossary.md"


def three_runs(path: Path) -> None:
    """Run 1 priced ($0.002, a bash call); run 2 streamed with no usage at all, then was
    interrupted; run 3 resumes run 2 ($0.001)."""
    init = HeaderInit(cwd=str(path.parent), provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        first = Run(environment="/w")
        store.commit(first.start("List the files"))
        store.commit(first.attempt())
        store.commit(first.answer(None, [("c1", "bash", {"command": "ls"})]))
        intent = first.intent("c1", BASH, {"command": "ls"})
        store.commit([intent])
        store.commit([Run.result(intent, "a b\n[exit code 0]")])
        store.commit(first.attempt())
        store.commit(first.answer("Two files."))
        store.commit(first.finish())

        second = Run(environment="/w")
        store.commit(second.start("Stream without usage"))
        store.commit(second.attempt())
        assert second.attempt_id is not None
        answer = f.assistant_message(second.attempt_id, content="Hi.", finish_reason="stop")
        store.commit([answer])  # a server that sends no usage chunk
        store.commit(second.finish("interrupted"))

        third = Run(environment="/w")
        store.commit([f.resume_started(third.operation_id, second.operation_id)])
        store.commit(third.attempt())
        store.commit(third.answer("Resumed."))
        store.commit(third.finish())


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    yield from fresh_shell(tmp_path, monkeypatch, {"TINY_AGENT_DEMO": "0"}, "glossary.ipynb")


def surfaces(
    shell: InteractiveShell, path: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, str]:
    """What each surface shows of the session at `path`, as text."""
    shell.run_cell("%load_ext tiny_agent_nb")
    shell.run_cell(f"%agent session {path}")
    with capture_output() as shown:
        assert shell.run_cell("%agent timeline").error_in_exec is None
    (markup,) = [o.data["text/html"] for o in shown.outputs if "text/html" in o.data]
    capsys.readouterr()
    assert shell.run_cell("%agent usage").error_in_exec is None
    usage = capsys.readouterr().out
    assert main(["timeline", str(path)]) == 0
    cli = capsys.readouterr().out
    # The timeline's words, as a reader sees them: tags out, entities decoded.
    text = html.unescape(re.sub(r"<style>.*?</style>|<[^>]+>", " ", markup, flags=re.DOTALL))
    return {"html": " ".join(text.split()), "cli": " ".join(cli.split()), "usage": usage}


def test_the_timeline_html_the_cli_timeline_and_agent_usage_use_the_same_words_and_money(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "three.agent.jsonl"
    three_runs(path)
    seen = surfaces(shell, path, capsys)
    usage = seen["usage"]
    # %agent usage prints `tiny-agent-nb usage`'s table: one row per run, then the total,
    # in the timeline's money, and no zero for tokens nobody reported.
    assert re.search(r"^1 +run +completed +200 +20 +0 +0 +\$0\.002 ", usage, re.M), usage
    assert re.search(r"^2 +run +interrupted +(unknown +){5}\S", usage, re.M), usage
    assert re.search(r"^3 +resume +completed +100 +10 +0 +0 +\$0\.001 ", usage, re.M)
    assert re.search(r"^ +total +300 +30 +0 +0 +at least \$0\.003$", usage, re.M)
    for surface in ("html", "cli"):
        words = seen[surface]
        assert "200 in / 20 out · cost $0.002" in words, (surface, words)
        assert "usage unknown · cost unknown" in words, (surface, words)  # not "0 in / 0 out"
        assert "100 in / 10 out · cost $0.001" in words, (surface, words)
        assert "300 in / 30 out · cost at least $0.003" in words, (surface, words)
        assert "3 run(s), 4 attempt(s), 1 tool call(s)" in words, (surface, words)
        assert "attempt 1.1" in words and "step 1." not in words, (surface, words)
        assert "resume continues run 2" in words and "resume resume" not in words, surface
    # what happened to a call, not its replay policy (a tooltip), on a run no crash cut off
    assert "never re-run" not in seen["html"] and "(never)" not in seen["html"]
    for surface, words in seen.items():
        amounts = re.findall(r"\$[\d.]+", words)
        assert amounts and all(re.fullmatch(r"\$\d+\.\d{2,6}", a) for a in amounts), surface
        assert "unpriced" not in words and "operation" not in words, (surface, words)


def test_the_glossary_names_the_words_the_surfaces_use() -> None:
    glossary = GLOSSARY.read_text()
    for word in (
        "run",
        "resume",
        "attempt 1.1",
        "tool call",
        "never re-run",
        "re-read after a crash",
        "time__get_current_time · mcp:time",
        "usage unknown",
        "no usage reported",
        "it may have run; it was not run again",
        "stopped with the Stop button",
        "cost unknown",
        "at least $0.003",
        "$0.002",
    ):
        assert f"`{word}`" in glossary, word


def mcp_run(path: Path, *, finished: bool = True) -> None:
    """One run: a bash call, then an MCP call (`time__get_current_time`, recorded as the
    server's `get_current_time` from `mcp:time`) that reported usage of its own."""
    init = HeaderInit(cwd=str(path.parent), provider="p", model="m", environment_identity="/w")
    with SessionStore.open(path, create=init) as store:
        run = Run(environment="/w")
        store.commit(run.start("What time is it?"))
        store.commit(run.attempt())
        calls = [("c1", "bash", {"command": "date"}), ("c2", "time__get_current_time", {})]
        store.commit(run.answer(None, calls))
        bash = run.intent("c1", BASH, {"command": "date"})
        store.commit([bash])
        store.commit([Run.result(bash, "Mon\n[exit code 0]")])
        clock = ToolIdentity(name="get_current_time", version="1.2.0", source="mcp:time")
        intent = run.intent("c2", clock, {})
        store.commit([intent])
        assert intent.id is not None
        if not finished:
            return  # the kernel died during the MCP call
        tool_usage = f.usage(
            tool_started_id=intent.id, input_tokens=40, output_tokens=7, cost=0.0031
        )
        store.commit([Run.result(intent, "12:00"), tool_usage])
        store.commit(run.attempt())
        store.commit(run.answer("Noon."))
        store.commit(run.finish())


def test_the_timeline_html_and_the_cli_timeline_show_a_tool_calls_source_and_its_own_usage(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mcp.agent.jsonl"
    mcp_run(path)
    seen = surfaces(shell, path, capsys)
    for surface in ("html", "cli"):
        words = seen[surface]
        assert "time__get_current_time · mcp:time" in words, (surface, words)
        assert "· 40 in / 7 out · cost $0.0031" in words, (surface, words)
        assert "bash · " not in words and "builtin" not in words, (surface, words)
        # The run's ledger counts its attempts' usage and the tool's.
        assert "240 in / 27 out · cost $0.0051" in words, (surface, words)
    assert re.search(r"^1 +run +completed +240 +27 +0 +0 +\$0\.0051 ", seen["usage"], re.M)


def test_an_mcp_tool_has_one_name_on_every_surface(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The name the model called, which `--tools` takes (`time__get_current_time`), and
    its source: in the report of the kernel that settles the call, `%agent status`, the
    timeline's HTML and text, `tiny-agent-nb timeline` and `inspect`. Never the server's
    own name alone (`get_current_time`, which the intent's identity keeps)."""
    path = tmp_path / "mcp.agent.jsonl"
    mcp_run(path, finished=False)
    shell.run_cell("%load_ext tiny_agent_nb")
    capsys.readouterr()
    shell.run_cell(f"%agent session {path}")
    said = {"report": capsys.readouterr().out}
    shell.run_cell("%agent status")
    said["status"] = capsys.readouterr().out
    with capture_output() as shown:
        shell.run_cell("%agent timeline")
    (bundle,) = [o.data for o in shown.outputs if "text/html" in o.data]
    said["timeline text"] = bundle["text/plain"]
    tags = re.compile(r"<style>.*?</style>|<[^>]+>", re.DOTALL)
    said["timeline html"] = html.unescape(tags.sub("", bundle["text/html"]))
    for command in ("timeline", "inspect"):
        assert main([command, str(path)]) == 0
        said[command] = capsys.readouterr().out
    for surface, words in said.items():
        assert "time__get_current_time · mcp:time" in words, (surface, words)
        assert not re.search(r"(?<!time__)get_current_time", words), (surface, words)
    assert "⚠ time__get_current_time · mcp:time interrupted" in said["status"]
