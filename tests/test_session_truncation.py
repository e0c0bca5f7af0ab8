"""Property: a session cut at ANY byte loads as its longest whole-transaction prefix,
and a writer reopening the cut file repairs it so the next commit loads cleanly.

Expected states come from the writer's own in-memory state after each commit; actual
states come from reading truncated bytes back. The two paths share only the reducer.

The cuts are checked in memory (`load_session_bytes`, `SessionStore.in_memory`: the
reader and the writer's open/repair/commit code over a bytearray), where a cut costs a
reduction and no file; one on-disk pass over fewer cuts keeps the file path covered.
"""

from __future__ import annotations

import itertools
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiny_agent_nb.agent import plan_recovery
from tiny_agent_nb.session import (
    HeaderInit,
    NewFact,
    NotASessionError,
    SessionStore,
    load_session,
    load_session_bytes,
    new_id,
)
from tiny_agent_nb.session import facts as f

from helpers.scenario import BASH, READ_FILE, Run

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
        yield [
            f.NewFact(f.AbortRequested(operationId=run.operation_id, reason="KeyboardInterrupt")),
            *run.finish("aborted"),
        ]
    else:
        yield run.finish(ending)


def _recover(store: SessionStore, environment: str) -> list[NewFact]:
    """What the planner commits after a crash: resolve everything, finish interrupted
    (no tool is registered, so no read is replayed)."""
    plan = plan_recovery(store.load(), {}, environment)
    return [] if plan is None else plan.closing_transaction()


def _write_session(data: st.DataObject, init: HeaderInit) -> tuple[bytes, list[dict[str, Any]]]:
    """Commit a random valid session; return its bytes and the summary after the header
    and after each commit."""
    buffer = bytearray()
    summaries = []
    with SessionStore.in_memory(buffer, create=init) as store:
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
                    recovery = _recover(store, init.environment_identity)
                    if recovery:
                        store.commit(recovery)
                        summaries.append(store.load().summary())
                    break
                if count == crash_after:
                    break  # the last run may stay open, as after a kill
    return bytes(buffer), summaries


# Cuts within this many bytes of an LF (either side) are all checked: a cut exactly at
# an LF, just before it (the line loses its LF) and just after (a clean boundary) are
# where framing bugs live; so is every cut inside the header line.
NEAR_LF = 3
# Elsewhere, inside a line, one cut in SAMPLE_EVERY is checked (chosen by a random
# generator drawn from hypothesis, so a failure replays and shrinks like any draw): a cut
# anywhere strictly inside a line is the same torn tail to the reader, only its length
# differs, and every length up to NEAR_LF is covered exhaustively.
SAMPLE_EVERY = 6


def _cuts(raw: bytes, rng: random.Random) -> list[int]:
    """Every cut near an LF or inside the header line, and a sample of the others."""
    header_end = raw.find(b"\n") + 1
    near = set(range(header_end + NEAR_LF + 1))
    for lf in (i for i, byte in enumerate(raw) if byte == 0x0A):
        near.update(range(max(0, lf - NEAR_LF), min(len(raw), lf + NEAR_LF + 1) + 1))
    rest = [k for k in range(len(raw) + 1) if k not in near]
    sample = rng.sample(rest, len(rest) // SAMPLE_EVERY)
    return sorted(near.union(sample, [len(raw)]))


def _expected(raw: bytes, k: int, summaries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The summary a load of raw[:k] gives; None: it is no session (no whole header)."""
    complete_lines = raw.count(b"\n", 0, k)
    if complete_lines == 0:
        return None
    last_lf = raw.rfind(b"\n", 0, k)
    return {**summaries[complete_lines - 1], "tornTailBytes": k - last_lf - 1}


@pytest.mark.slow
# Ten sessions: each draws runs that fail, retry, abort, crash and resume, and is cut
# ~1,400 times, at every byte near a line end (20 sessions took 11 s of CPU, 10 take 5).
@settings(max_examples=10)
@given(data=st.data())
def test_every_truncation_loads_the_longest_whole_prefix_and_repairs(data: st.DataObject) -> None:
    init = HeaderInit(cwd="/w", provider="openrouter", model="m", environment_identity="/w")
    raw, summaries = _write_session(data, init)
    rng = data.draw(st.randoms(use_true_random=False), label="sampled cuts")
    # Every repair commits the same fact at the same time, so cuts with the same whole
    # lines heal into the same bytes when the writer repairs as it should; a load of
    # bytes already loaded is not done again (`load_session_bytes` is a function of its
    # bytes). A repair that kept any of the torn tail gives other bytes, loaded anew.
    after_repair, at = new_id(), time.time_ns() // 1_000_000  # after every commit's
    healed_loads: dict[bytes, tuple[int, int]] = {}
    for k in _cuts(raw, rng):
        expected = _expected(raw, k, summaries)
        if expected is None:
            with pytest.raises(NotASessionError):
                load_session_bytes(raw[:k])
        else:
            assert load_session_bytes(raw[:k]).summary() == expected, f"cut at byte {k}"
        buffer = bytearray(raw[:k])
        with SessionStore.in_memory(buffer, create=init, clock=lambda: at) as writer:
            writer.commit([f.user_message("after repair", id=after_repair)])
        healed = bytes(buffer)
        if healed not in healed_loads:
            state = load_session_bytes(healed)
            healed_loads[healed] = (state.torn_tail_bytes, state.last_seq)
        torn_tail_bytes, last_seq = healed_loads[healed]
        assert torn_tail_bytes == 0
        expected_seq = 0 if expected is None else expected["lastSeq"]
        assert last_seq == expected_seq + 1, f"cut at byte {k}"
    assert load_session_bytes(raw).summary() == summaries[-1]


@settings(max_examples=5)
@given(data=st.data())
def test_truncated_files_on_disk_load_and_are_repaired_by_a_writer(data: st.DataObject) -> None:
    """End to end through files: per line, the cut just after its LF and one inside it."""
    with tempfile.TemporaryDirectory() as tmp:
        init = HeaderInit(cwd=tmp, provider="openrouter", model="m", environment_identity=tmp)
        raw, summaries = _write_session(data, init)
        rng = data.draw(st.randoms(use_true_random=False), label="cut inside each line")
        starts = [0] + [i + 1 for i, byte in enumerate(raw) if byte == 0x0A]
        cuts = {0, len(raw)}
        for start, end in itertools.pairwise(starts):
            cuts.update((end, rng.randrange(start, end)))
        cut = Path(tmp) / "cut.jsonl"
        for k in sorted(cuts):
            cut.write_bytes(raw[:k])
            expected = _expected(raw, k, summaries)
            if expected is None:
                with pytest.raises(NotASessionError):
                    load_session(cut)
            else:
                assert load_session(cut).summary() == expected, f"cut at byte {k}"
            with SessionStore.open(cut, create=init) as writer:
                writer.commit([f.user_message("after repair", id=new_id())])
            healed = load_session(cut)
            assert healed.torn_tail_bytes == 0
            expected_seq = 0 if expected is None else expected["lastSeq"]
            assert healed.last_seq == expected_seq + 1, f"cut at byte {k}"
