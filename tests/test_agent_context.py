"""The context: what the model is sent, built from the session for each request
(tests/test_agent_context_reference.py holds it to a reference at every state)."""

from __future__ import annotations

import json
from pathlib import Path

from tiny_agent_nb.agent import NOT_STARTED, build_context
from tiny_agent_nb.agent._turns import SUMMARY_LEAD
from tiny_agent_nb.provider import messages as m
from tiny_agent_nb.session import SessionStore
from tiny_agent_nb.session import facts as f

from helpers.scenario import BASH, Run, complete_run


def sent(store: SessionStore, system: str | None = None) -> list[dict[str, object]]:
    return json.loads(m.encode(build_context(store.load(), system)))  # type: ignore[no-any-return]


def test_the_system_prompt_then_every_entry(store: SessionStore) -> None:
    for _ in range(37):
        complete_run(store)
    messages = sent(store, "be brief")
    assert messages[0] == {"role": "system", "content": "be brief"}
    assert len(messages) == 1 + 37 * 4  # user, assistant call, tool result, answer


def test_never_started_tool_calls_are_answered_before_the_next_message(
    store: SessionStore, tmp_path: Path
) -> None:
    run = Run(environment=str(tmp_path))
    store.commit(run.start("two commands"))
    store.commit(run.attempt())
    store.commit(
        run.answer(None, [("c1", "bash", {"command": "a"}), ("c2", "bash", {"command": "b"})])
    )
    intent = run.intent("c1", BASH, {"command": "a"})
    store.commit([intent, Run.result(intent, "done")])
    store.commit(
        [
            f.NewFact(f.AbortRequested(operationId=run.operation_id, reason="Ctrl-C")),
            f.NewFact(f.OperationFinished(operationId=run.operation_id, outcome="aborted")),
        ]
    )
    pending = sent(store)
    assert pending[-1] == {"role": "tool", "tool_call_id": "c2", "content": NOT_STARTED}
    store.commit([f.user_message("next question")])
    after = sent(store)
    roles = [(m["role"], m.get("tool_call_id")) for m in after]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("tool", "c1"),
        ("tool", "c2"),
        ("user", None),
    ]


def test_compaction_replaces_what_it_summarizes(store: SessionStore) -> None:
    complete_run(store, "first")
    through = list(store.load().entries)[-1]
    store.commit(
        [f.NewFact(f.CompactionEntry(summary="they listed files", throughEntryId=through))]
    )
    complete_run(store, "second")
    messages = sent(store)
    assert messages[0] == {"role": "user", "content": SUMMARY_LEAD}
    assert messages[1] == {
        "role": "assistant",  # the model's own note: not in the user's voice
        "content": "[Summary of the earlier conversation]\nthey listed files",
    }
    assert messages[2] == {"role": "user", "content": "second"}


def test_a_checkpoint_keeps_the_messages_after_its_cut_and_their_unanswered_call(
    store: SessionStore, tmp_path: Path
) -> None:
    complete_run(store, "first")
    run = Run(environment=str(tmp_path))
    store.commit(run.start("two commands"))
    cut = list(store.load().entries)[-2]  # "first"'s answer: the cut keeps "two commands"
    store.commit(run.attempt())
    store.commit(
        run.answer(None, [("c1", "bash", {"command": "a"}), ("c2", "bash", {"command": "b"})])
    )
    intent = run.intent("c1", BASH, {"command": "a"})
    store.commit([intent, Run.result(intent, "done")])
    store.commit([f.NewFact(f.OperationFinished(operationId=run.operation_id, outcome="aborted"))])
    store.commit([f.NewFact(f.CompactionEntry(summary="they listed files", throughEntryId=cut))])
    expected = [
        ("user", SUMMARY_LEAD),
        ("assistant", "[Summary of the earlier conversation]\nthey listed files"),
        ("user", "two commands"),
        ("assistant", None),
        ("tool", "done"),
        ("tool", NOT_STARTED),  # c2 never started: still answered after the checkpoint
    ]
    assert [(m["role"], m["content"] or None) for m in sent(store)] == expected
    store.commit([f.user_message("next")])
    assert sent(store)[-2:] == [
        {"role": "tool", "tool_call_id": "c2", "content": NOT_STARTED},
        {"role": "user", "content": "next"},
    ]
