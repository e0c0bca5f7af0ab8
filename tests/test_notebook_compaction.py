"""`%agent compact` and automatic compaction in an in-process IPython shell: the cell's
line, status, and the next request starting from the summary."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tiny_agent_nb.cli import main
from tiny_agent_nb.render import timeline_html
from tiny_agent_nb.session import CompactionEntry, load_session
from tiny_agent_nb.timeline import build_timeline

from helpers.ipython_shell import run, shell
from helpers.openai_server import (
    OpenAIServer,
    model_entry,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage,
)

__all__ = ["shell"]  # the fixture, from ipython_shell

BIG = "y" * 8000


def _read(n: int) -> dict[str, object]:
    return tool_calls_reply(tool_call(f"r{n}", "read_file", {"path": "big.txt"}))


def _loaded(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str], *configs: str
) -> None:
    """big.txt beside the notebook, the extension loaded, then each `%config TinyAgent.` line."""
    (tmp_path / "big.txt").write_text(BIG)
    run(shell, "%load_ext tiny_agent_nb", capsys)
    for config in configs:
        run(shell, f"%config TinyAgent.{config}", capsys)


def test_agent_compact_summarizes_with_instructions_and_status_shows_it(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _loaded(shell, tmp_path, capsys, "keep_tail_tokens = 10")
    server.enqueue(_read(1), _read(2), text_reply("Read it twice."))
    run(shell, "%%agent\nRead big.txt twice", capsys)
    server.enqueue_summaries(text_reply("SUMMARY: big.txt is 8000 y's", usage=usage(cost=0.002)))
    out = run(shell, "%agent compact keep the file size", capsys)
    # One compaction, one description, every size in tokens: the summary's 28 characters
    # are ~7 tokens (bytes / 4); the context's sizes are estimates too.
    said = re.search(
        r"⇊ (compacted 5 entries into a summary of ~7 tokens: context ~\d+ → ~\d+ tokens)"
        r" · \$0\.002",
        out,
    )
    assert said, out
    words = said.group(1)
    (summarizing,) = [r for r in server.requests if "tools" not in r.body]
    assert "keep the file size" in summarizing.raw.decode()
    assert "nothing to compact" in run(shell, "%agent compact", capsys)
    status = run(shell, "%agent status", capsys)
    assert "context  window 32768 tokens by default, until the server states one" in status
    assert f"         1 compaction(s); the latest {words} · $0.002" in status
    assert "summary  SUMMARY: big.txt is 8000 y's (`%agent summary` shows it whole)" in status
    whole = run(shell, "%agent summary", capsys)
    assert whole.endswith("not as your words):\n\nSUMMARY: big.txt is 8000 y's\n")
    usage_view = run(shell, "%agent usage", capsys)
    assert re.search(r"^\d+ +compaction +completed ", usage_view, re.M) and "$0.002" in usage_view
    path = tmp_path / "analysis.agent.jsonl"
    assert main(["timeline", str(path)]) == 0
    shown = capsys.readouterr().out
    assert words in shown and "summarizes the conversation (%agent compact)" in shown
    assert html.escape(words) in timeline_html(build_timeline(load_session(path)))
    for surface in (out, status, shown):
        assert "characters" not in surface and "-token summary" not in surface, surface
    server.enqueue(text_reply("ok"))
    run(shell, "%%agent\nAnd now?", capsys)
    last = server.requests[-1].body["messages"]
    assert "SUMMARY: big.txt is 8000 y's" in last[2]["content"]
    assert BIG not in server.requests[-1].raw.decode()
    state = load_session(tmp_path / "analysis.agent.jsonl")
    assert [op.kind for op in state.operations.values()] == ["run", "compaction", "run"]


def test_a_cell_past_the_threshold_says_it_compacted(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _loaded(shell, tmp_path, capsys, "context_window = 4000", "keep_tail_tokens = 1000")
    server.enqueue(_read(1), _read(2), text_reply("Done."))
    server.enqueue_summaries(text_reply("SUMMARY"))
    out = run(shell, "%%agent\nRead big.txt twice", capsys)
    assert out.count("⇊ compacted") == 1 and "cost unknown" in out
    assert "Done." in out
    state = load_session(tmp_path / "analysis.agent.jsonl")
    assert sum(isinstance(e.entry, CompactionEntry) for e in state.entries.values()) == 1


def test_the_window_the_server_lists_sets_when_a_cell_compacts(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With TinyAgent.context_window unset, the model's own window (GET /models) is the
    one the threshold is taken of: 4000 tokens here, where the default would not compact."""
    server.models = [model_entry(context_length=4000)]
    _loaded(shell, tmp_path, capsys, "keep_tail_tokens = 1000")
    server.enqueue(_read(1), _read(2), text_reply("Done."))
    server.enqueue_summaries(text_reply("SUMMARY"))
    out = run(shell, "%%agent\nRead big.txt twice", capsys)
    assert out.count("⇊ compacted") == 1 and "Done." in out
    # asked once for the session, not per attempt
    assert [r.path for r in server.listings] == ["/v1/models"]


def test_a_window_the_tools_alone_fill_is_said_with_the_notebooks_advice(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The engine states why (the file keeps that); the cell adds the notebook's words
    for what to do next, which the file and the command line do not repeat."""
    _loaded(shell, tmp_path, capsys)
    server.context_limit, server.token_bytes = 1500, 3.5  # llama-server --ctx-size 1536
    out = run(shell, "%%agent\nWhat does big.txt say?", capsys)
    assert "✗ The run failed: the conversation does not fit the model's context window" in out
    assert "Everything is kept in the session. Next: offer fewer tools" in out, out
    assert "TinyAgent.system_prompt" in out
    path = tmp_path / "analysis.agent.jsonl"
    (op,) = load_session(path).operations.values()
    assert op.status == "failed" and op.detail is not None
    assert "definitions of the tools offered alone" in op.detail
    assert "Next:" not in op.detail and "TinyAgent" not in op.detail
    assert main(["inspect", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "definitions of the tools offered alone" in shown and "TinyAgent" not in shown


def test_a_compaction_with_nothing_to_summarize_is_stated_then_advised_in_the_cell(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`%agent compact` right after a compaction: the engine says why nothing can be
    summarized, with its figures; the cell adds the notebook's words, and nothing is
    written."""
    _loaded(shell, tmp_path, capsys, "keep_tail_tokens = 10")
    server.enqueue(_read(1), _read(2), text_reply("Read it twice."))
    run(shell, "%%agent\nRead big.txt twice", capsys)
    server.enqueue_summaries(text_reply("SUMMARY"))
    run(shell, "%agent compact", capsys)
    path = tmp_path / "analysis.agent.jsonl"
    before = path.read_bytes()
    out = run(shell, "%agent compact", capsys)
    assert (
        "tiny-agent-nb: nothing to compact: no part of the conversation can be summarized: "
        "keeping the newest 10 tokens verbatim (at most 25% of the window of 32768 tokens) "
        "leaves nothing before them that ends cleanly (every tool call with its result); "
        "the conversation since the last compaction takes about "
    ) in out, out
    assert out.rstrip().endswith(
        "tokens. The conversation is as it was. A smaller TinyAgent.keep_tail_tokens keeps "
        "less of it verbatim, and leaves `%agent compact` more to summarize."
    ), out
    assert path.read_bytes() == before


def test_a_compaction_the_tools_alone_defeat_is_stated_then_advised_and_the_cli_states_it(
    shell: InteractiveShell,
    server: OpenAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A window of 300 tokens that the tool definitions alone fill past the threshold:
    `%agent compact` asks no summary, and ends failed. The cell says the engine's figures
    and then the notebook's advice; the file and the command line keep the statement alone."""
    _loaded(shell, tmp_path, capsys, "context_window = 300", "keep_tail_tokens = 10")
    server.enqueue(text_reply("Hello."))
    run(shell, "%%agent\nHi", capsys)
    asked = len(server.requests)
    out = run(shell, "%agent compact", capsys)
    said = re.search(
        r"Compaction ended: failed — the system prompt and the definitions of the tools "
        r"offered alone take about (\d+) tokens, not under 240 \(0\.8 of the window of 300 "
        r"tokens\), so no summary of the conversation can make room: it could free about "
        r"(\d+) tokens at most\. Next: offer fewer tools",
        out,
    )
    assert said and int(said.group(1)) >= 240 and int(said.group(2)) > 0, out
    assert "TinyAgent.system_prompt" in out
    assert len(server.requests) == asked  # no summary was asked for
    path = tmp_path / "analysis.agent.jsonl"
    compaction = [op for op in load_session(path).operations.values() if op.kind == "compaction"]
    (op,) = compaction
    assert op.status == "failed" and op.detail is not None
    assert op.detail.startswith("the system prompt and the definitions of the tools")
    assert main(["inspect", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "so no summary of the conversation can make room" in shown
    for words in (op.detail, shown):
        assert "TinyAgent." not in words and "%agent" not in words and "Next:" not in words
