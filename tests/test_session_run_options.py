"""A run's options in its runStarted (docs/session-format.md §2.3): written as the run and its
resumes give them, read back from the file, and absent from files written before they
existed, which load as they did (options unknown)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from tiny_agent_nb.session import (
    HeaderInit,
    RunOptions,
    SessionStore,
    load_session,
    new_id,
)
from tiny_agent_nb.session import facts as f

INIT = HeaderInit(cwd="/w", provider="p", model="m", environment_identity="/w")
ASK_BASH = RunOptions(approve="ask", tools=["bash"], budget=0.05, maxSteps=25, model="m")
NO_LIMIT = RunOptions(approve="auto", tools=[], budget=None, maxSteps=3, model="m")


def _stopped_then_resumed(path: Path, run: RunOptions | None, resume: RunOptions | None) -> None:
    """A run interrupted before any request, then a resume of it, also interrupted."""
    with SessionStore.open(path, create=INIT) as store:
        entry_id, op_id, resume_id = new_id(), new_id(), new_id()
        store.commit([f.user_message("go", id=entry_id), f.run_started(op_id, entry_id, run)])
        store.commit([f.NewFact(f.OperationFinished(operationId=op_id, outcome="interrupted"))])
        store.commit([f.resume_started(resume_id, op_id, resume)])
        store.commit([f.NewFact(f.OperationFinished(operationId=resume_id, outcome="interrupted"))])


def _started(path: Path) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    facts = [fact for line in lines for fact in (line if isinstance(line, list) else [line])]
    return [x["record"] for x in facts if x["kind"] == "record" and "operationKind" in x["record"]]


def test_a_runs_options_are_written_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "s.agent.jsonl"
    _stopped_then_resumed(path, ASK_BASH, NO_LIMIT)
    assert [r["options"] for r in _started(path)] == [
        {"approve": "ask", "tools": ["bash"], "budget": 0.05, "maxSteps": 25, "model": "m"},
        {"approve": "auto", "tools": [], "budget": None, "maxSteps": 3, "model": "m"},
    ]
    operations = list(load_session(path).operations.values())
    assert [op.options for op in operations] == [ASK_BASH, NO_LIMIT]
    assert load_session(path).summary()["operations"][0]["options"]["tools"] == ["bash"]


def test_a_file_written_before_options_loads_with_them_unknown(tmp_path: Path) -> None:
    path = tmp_path / "s.agent.jsonl"
    _stopped_then_resumed(path, None, None)
    assert ["options" in r for r in _started(path)] == [False, False]  # as before: no member
    state = load_session(path)
    assert [op.options for op in state.operations.values()] == [None, None]
    assert all("options" not in op for op in state.summary()["operations"])


@pytest.mark.parametrize(
    "bad",
    [
        {"budget": -0.01},
        {"budget": float("nan")},
        {"maxSteps": 0},
        {"approve": "sometimes"},
        {"tools": [""]},
    ],
)
def test_options_the_format_does_not_allow_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RunOptions.model_validate({**ASK_BASH.model_dump(), **bad})


def test_a_compaction_records_no_options() -> None:
    fact = f.compaction_started(new_id()).body
    with pytest.raises(ValidationError, match="a 'compaction' has no options"):
        type(fact).model_validate({**fact.model_dump(), "options": ASK_BASH.model_dump()})
