"""Property: a session cut at ANY byte loads as its longest whole-transaction prefix,
and a writer reopening the cut file repairs it so the next commit loads cleanly.

Expected states come from the writer's own in-memory state after each commit; actual
states come from reading truncated bytes back. The two paths share only the reducer.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiny_agent_nb.session import (
    HeaderInit,
    NewFact,
    NotASessionError,
    SessionStore,
    load_session,
    new_id,
)
from tiny_agent_nb.session import facts as f

from scenario import BASH, READ_FILE, Run

# Few characters, many of them multi-byte, so cuts land inside UTF-8 sequences often.
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)


def _run(data: st.DataObject, env: str, run: Run, prompt: str | None) -> Iterator[list[NewFact]]:
    """Transactions of one operation, drawn step by step; may end without finishing."""
    if prompt is not None:
        yield run.start(prompt)
    steps = data.draw(st.integers(1, 2), label="steps")
    for step in range(1, steps + 1):
        failures = data.draw(st.integers(0, 1), label="failed attempts")
        for attempt in range(1, failures + 1):
            yield run.attempt(attempt)
            assert run.attempt_id is not None
            yield [
                f.attempt_failed(
                    run.attempt_id, kind="http", message="429", retryable=True, status=429
                )
            ]
        yield run.attempt(failures + 1)
        n_calls = 0 if step == steps else data.draw(st.integers(0, 2), label="calls")
        calls = [
            (f"call_{step}_{i}", "bash" if i % 2 else "read_file", {"arg": data.draw(TEXT)})
            for i in range(n_calls)
        ]
        cost = data.draw(st.sampled_from([None, 0.001, 0.25]), label="cost")
        yield run.answer(data.draw(TEXT), calls, cost=cost)
        for call_id, name, args in calls:
            intent = run.intent(call_id, BASH if name == "bash" else READ_FILE, args)
            outcome = data.draw(st.sampled_from(["completed", "error", "denied"]))
            result = Run.result(intent, data.draw(TEXT), outcome)
            if data.draw(st.booleans(), label="intent and result in one transaction"):
                yield [intent, result]
            else:
                yield [intent]
                yield [result]
    ending = data.draw(st.sampled_from(["completed", "stepLimit", "aborted", "failed"]))
    if ending == "aborted":
        yield [f.abort_requested(run.operation_id, "KeyboardInterrupt"), *run.finish("aborted")]
    else:
        yield run.finish(ending)


def _recover(store: SessionStore) -> list[NewFact]:
    """What the planner commits after a crash: resolve everything, finish interrupted."""
    state = store.load()
    op = state.open_operation
    if op is None:
        return []
    out: list[NewFact] = []
    for a in state.attempts.values():
        if a.operation_id == op.id and a.status == "pending":
            out.append(
                f.attempt_failed(a.id, kind="interrupted", message="kernel died", retryable=False)
            )
    for i in state.tool_intents.values():
        if i.operation_id == op.id and i.status == "pending":
            out.append(
                f.tool_result(
                    tool_started_id=i.id,
                    result_entry_id=i.result_entry_id,
                    tool_call_id=i.tool_call_id,
                    content="Interrupted",
                    outcome="interrupted",
                )
            )
    return [*out, f.operation_finished(op.id, "interrupted")]


def _write_session(data: st.DataObject, path: Path, init: HeaderInit) -> list[dict[str, Any]]:
    """Commit a random valid session; return the summary after the header and each commit."""
    summaries = []
    with SessionStore.open(path, create=init) as store:
        summaries.append(store.load().summary())
        runs = data.draw(st.integers(1, 2), label="runs")
        for index in range(runs):
            state = store.load()
            resumable = [
                o for o in state.operations.values() if o.status in ("interrupted", "aborted")
            ]
            run = Run(environment=init.environment_identity)
            if resumable and data.draw(st.booleans(), label="resume"):
                store.commit([f.resume_started(run.operation_id, resumable[-1].id)])
                summaries.append(store.load().summary())
                transactions = _run(data, init.environment_identity, run, None)
            else:
                transactions = _run(data, init.environment_identity, run, data.draw(TEXT))
            crash_after = data.draw(st.integers(1, 40), label="crash after")
            for count, transaction in enumerate(transactions, start=1):
                store.commit(transaction)
                summaries.append(store.load().summary())
                if count == crash_after and index < runs - 1:
                    recovery = _recover(store)
                    if recovery:
                        store.commit(recovery)
                        summaries.append(store.load().summary())
                    break
                if count == crash_after:
                    break  # the last run may stay open, as after a kill
    return summaries


def _reopen_here(raw: bytes, k: int) -> bool:
    """Reopening as a writer costs ~10x a read, so it is checked at every cut near a
    line boundary (the interesting ones: exactly at an LF, one byte either side) and at
    every 5th byte elsewhere; the read-only load is checked at every byte."""
    return k % 5 == 0 or b"\n" in raw[max(0, k - 2) : k + 2]


@settings(max_examples=20)
@given(data=st.data())
def test_every_truncation_loads_the_longest_whole_prefix_and_repairs(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        init = HeaderInit(cwd=tmp, provider="openrouter", model="m", environment_identity=tmp)
        original = root / "original.jsonl"
        summaries = _write_session(data, original, init)
        raw = original.read_bytes()
        cut = root / "cut.jsonl"
        complete_lines = 0
        last_lf = -1
        for k in range(len(raw) + 1):
            if k and raw[k - 1] == 0x0A:
                complete_lines += 1
                last_lf = k - 1
            cut.write_bytes(raw[:k])
            if complete_lines == 0:
                with pytest.raises(NotASessionError):
                    load_session(cut)
                expected_seq = 0
            else:
                expected = {**summaries[complete_lines - 1], "tornTailBytes": k - last_lf - 1}
                assert load_session(cut).summary() == expected, f"cut at byte {k}"
                expected_seq = expected["lastSeq"]
            if not _reopen_here(raw, k):
                continue
            with SessionStore.open(cut, create=init) as writer:
                writer.commit([f.user_message("after repair", id=new_id())])
            healed = load_session(cut)
            assert healed.torn_tail_bytes == 0
            assert healed.last_seq == expected_seq + 1, f"cut at byte {k}"
        assert load_session(original).summary() == summaries[-1]
