"""The timeline says what happened: a call's replay policy is a tooltip, never a line's
claim about a crash that did not happen; each call sits under the attempt that asked for
it; a run that reported no usage says so instead of zeros; a compaction is described in
tokens, the same way on every surface."""

from __future__ import annotations

import html
import re

from tiny_agent_nb.render import timeline_html, timeline_text
from tiny_agent_nb.session import SessionStore
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.timeline import build_timeline

from helpers.scenario import BASH, READ_FILE, Run

TAGS = re.compile(r"<style>.*?</style>|<[^>]+>", re.DOTALL)


def _words(markup: str) -> str:
    """The HTML as a reader sees it: tags out, entities decoded, one line."""
    return " ".join(html.unescape(TAGS.sub(" ", markup)).split())


def _two_steps(store: SessionStore) -> None:
    """A run of two steps, each of whose answers asks for one call: read_file, then bash;
    no crash anywhere."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Read, then list"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("c1", "read_file", {"path": "a.txt"})]))
    intent = run.intent("c1", READ_FILE, {"path": "a.txt"})
    store.commit([intent, Run.result(intent, "A")])
    store.commit(run.attempt())
    store.commit(run.answer(None, [("c2", "bash", {"command": "ls"})]))
    intent = run.intent("c2", BASH, {"command": "ls"})
    store.commit([intent, Run.result(intent, "a.txt")])
    store.commit(run.attempt())
    store.commit(run.answer("Done."))
    store.commit(run.finish())


def test_a_run_no_crash_touched_shows_no_replay_policy_on_its_calls(store: SessionStore) -> None:
    _two_steps(store)
    timeline = build_timeline(store.load())
    markup = timeline_html(timeline)
    shown = _words(markup) + "\n" + timeline_text(timeline)
    assert "re-read after a crash" not in shown and "never re-run" not in shown, shown
    # The policy is still there for whoever asks: the call line's tooltip, escaped.
    tooltips = re.findall(r'<summary title="([^"]*)">', markup)
    assert tooltips == [
        "replay policy: re-read after a crash if a crash cuts this call off",
        "replay policy: never re-run if a crash cuts this call off",
    ]
    assert re.findall(r'data-replay-policy="(\w+)"', markup) == ["safeRead", "never"]


def test_a_call_re_read_or_cut_off_by_a_crash_says_so(store: SessionStore) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Read and deploy"))
    store.commit(run.attempt())
    calls = [("c1", "read_file", {"path": "a.txt"}), ("c2", "bash", {"command": "./deploy"})]
    store.commit(run.answer(None, calls))
    read = run.intent("c1", READ_FILE, {"path": "a.txt"})
    deploy = run.intent("c2", BASH, {"command": "./deploy"})
    store.commit([read, deploy])  # the kernel died here; recovery answered both
    store.commit([Run.result(read, "A", "replayed"), Run.result(deploy, "?", "interrupted")])
    store.commit(run.finish("interrupted"))

    timeline = build_timeline(store.load())
    text = timeline_text(timeline)
    assert 'tool  replayed    read_file path="a.txt" — re-read after a crash' in text
    assert (
        'tool  interrupted bash command="./deploy" — it may have run; it was not run again'
    ) in text
    words = _words(timeline_html(timeline))
    assert 'read_file path="a.txt" — re-read after a crash' in words
    assert 'bash command="./deploy" — it may have run; it was not run again' in words


def test_a_call_cut_off_by_a_stop_says_the_stop_not_a_crash(store: SessionStore) -> None:
    """The run recorded who stopped it (`abortRequested.reason`): its call cut off says
    that reason, escaped like all of the file's text, and its effects kept; the crash's
    "it may have run" is for a process that died."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Deploy"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("c2", "bash", {"command": "./deploy"})]))
    deploy = run.intent("c2", BASH, {"command": "./deploy"})
    store.commit([deploy])
    reason = "stopped by <b>a kernel restart</b>\x1b[2J"
    stop = [f.NewFact(f.AbortRequested(operationId=run.operation_id, reason=reason))]
    store.commit([*stop, Run.result(deploy, "?", "interrupted"), *run.finish("aborted")])

    timeline = build_timeline(store.load())
    text = timeline_text(timeline)
    said = 'bash command="./deploy" — stopped by <b>a kernel restart</b>\\x1b[2J; its effects'
    assert f"tool  interrupted {said} up to then are kept" in text, text
    markup = timeline_html(timeline)
    assert "<b>a kernel" not in markup and "\x1b" not in markup
    assert f"{said} up to then are kept" in _words(markup)
    assert "it may have run" not in text + markup


def test_each_tool_call_sits_under_the_attempt_that_asked_for_it(store: SessionStore) -> None:
    _two_steps(store)
    timeline = build_timeline(store.load())
    markup = timeline_html(timeline)
    order = [a or t for a, t in re.findall(r'(attempt \d\.\d) |data-tool="(\w+)"', markup)]
    assert order == ["attempt 1.1", "read_file", "attempt 2.1", "bash", "attempt 3.1"], order
    text = timeline_text(timeline)
    rows = [line.split()[:3] for line in text.splitlines() if line.startswith("  ")]
    assert [r[1] if r[0] == "attempt" else r[2] for r in rows] == [
        "1.1", "read_file", "2.1", "bash", "3.1"
    ], text  # fmt: skip
    assert re.search(r"  attempt 1\.1 .*\n    tool  completed   read_file", text), text


def test_a_run_whose_requests_all_failed_says_no_usage_was_reported(
    store: SessionStore,
) -> None:
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Hi"))
    store.commit(run.attempt())
    assert run.attempt_id is not None
    failed = f.attempt_failed(run.attempt_id, kind="network", message="refused", retryable=False)
    store.commit([failed])
    store.commit(
        [
            f.NewFact(
                f.OperationFinished(
                    operationId=run.operation_id, outcome="failed", detail="refused"
                )
            )
        ]
    )

    timeline = build_timeline(store.load())
    for shown in (_words(timeline_html(timeline)), timeline_text(timeline)):
        assert "no usage reported" in shown, shown
        assert "0 in / 0 out" not in shown and "$0.00" not in shown, shown


def test_a_compaction_is_described_in_tokens_also_from_a_file_without_its_size_after(
    store: SessionStore,
) -> None:
    """A file written before compactions recorded `tokensAfter` still reads in the same
    words and unit: what it has, the size before, in tokens; never a character count."""
    first = Run(environment=store.header.environmentIdentity)
    store.commit(first.start("Hi"))
    store.commit(first.attempt())
    store.commit(first.answer("Hello."))
    store.commit(first.finish())
    last = list(store.load().entries)[-1]
    compaction = Run(environment=store.header.environmentIdentity)
    store.commit([f.compaction_started(compaction.operation_id)])
    store.commit(compaction.attempt())
    summary = "The user said hi; the model said hello."  # 39 bytes: ~10 tokens
    old = f.NewFact(
        f.CompactionEntry(
            summary=summary, throughEntryId=last, attemptId=compaction.attempt_id, tokensBefore=340
        )
    )
    store.commit([old, *compaction.answer(None)[1:], *compaction.finish()])

    timeline = build_timeline(store.load())
    words = "compacted 2 entries into a summary of ~10 tokens: context ~340 tokens before"
    assert words in timeline_text(timeline)
    assert words in _words(timeline_html(timeline))
