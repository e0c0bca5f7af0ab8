"""A fork through run K (`fork_session(..., through=K)`): the source's header under a new
id, then exactly the source's transaction lines up to the one that ends run K; refused,
with nothing written, for a run that does not exist or has not ended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiny_agent_nb.agent import build_context
from tiny_agent_nb.provider import messages
from tiny_agent_nb.session import (
    FileStore,
    ForkRefusedError,
    SessionStore,
    ToolIdentity,
    fork_session,
    load_session,
)

from helpers.cli_helpers import untouched
from helpers.scenario import Run, complete_run


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _finishing_line(path: Path, number: int) -> int:
    """The 0-based line (the header is line 0) holding run `number`'s operationFinished,
    read as JSON here, not through the store."""
    started: list[str] = []
    for index, line in enumerate(_lines(path)[1:], start=1):
        parsed = json.loads(line)
        for fact in parsed if isinstance(parsed, list) else [parsed]:
            record = fact.get("record", {})
            if record.get("type") == "runStarted":
                started.append(record["operationId"])
            if record.get("type") == "operationFinished" and started[number - 1 :][:1] == [
                record["operationId"]
            ]:
                return index
    raise AssertionError(f"run {number} never finished")


def _context(state_path: Path) -> list[object]:
    return json.loads(messages.encode(build_context(load_session(state_path), None)))  # type: ignore[no-any-return]


@pytest.mark.parametrize("number", [1, 2])
def test_a_fork_through_a_run_is_the_exact_prefix_up_to_its_end(
    three_runs: Path, tmp_path: Path, number: int
) -> None:
    target = tmp_path / "fork.agent.jsonl"
    with untouched(three_runs):
        header = fork_session(three_runs, target, through=number)
    source, fork = _lines(three_runs), _lines(target)
    end = _finishing_line(three_runs, number)
    assert fork[1:] == source[1 : end + 1]  # byte for byte
    original = load_session(three_runs).header
    assert json.loads(fork[0]) == json.loads(header.model_dump_json())
    assert header.id != original.id
    assert header.model_copy(update={"id": original.id, "createdAt": 0}) == (
        original.model_copy(update={"createdAt": 0})
    )
    state = load_session(target)
    assert [op.id for op in state.operations.values()] == [
        op.id for op in list(load_session(three_runs).operations.values())[:number]
    ]
    assert state.open_operation is None


def test_a_fork_holds_the_conversation_as_it_was_when_the_run_ended(
    store: SessionStore, session_path: Path, tmp_path: Path
) -> None:
    complete_run(store, "first")
    complete_run(store, "second")
    then = _context(session_path)
    complete_run(store, "third")
    assert _context(session_path) != then
    target = tmp_path / "fork.agent.jsonl"
    fork_session(session_path, target, through=2)
    assert _context(target) == then


def test_a_fork_of_everything_copies_every_line(three_runs: Path, tmp_path: Path) -> None:
    """The default: every line, a run left open included (a duplicated notebook's fork;
    its first writer settles the run)."""
    target = tmp_path / "fork.agent.jsonl"
    fork_session(three_runs, target)
    assert _lines(target)[1:] == _lines(three_runs)[1:]
    assert load_session(target).open_operation is not None


@pytest.mark.parametrize(
    ("through", "refuse_open", "said"),
    [
        (3, False, "run 3 of {path} has not ended"),
        (None, True, "run 3 of {path} has not ended"),
        (4, False, "{path} has no run 4 (its runs are 1 to 3"),
        (0, False, "{path} has no run 0 (its runs are 1 to 3"),
    ],
)
def test_a_fork_through_a_run_unknown_or_not_ended_is_refused_and_writes_nothing(
    three_runs: Path, tmp_path: Path, through: int | None, refuse_open: bool, said: str
) -> None:
    target = tmp_path / "fork.agent.jsonl"
    before = sorted(tmp_path.iterdir())
    with untouched(three_runs), pytest.raises(ForkRefusedError) as refused:
        fork_session(three_runs, target, through=through, refuse_open=refuse_open)
    assert said.format(path=three_runs) in str(refused.value)
    assert "nothing was written" in str(refused.value)
    if through == 3:
        assert "Fork through an earlier run (2), or fork once it has ended" in str(refused.value)
    assert sorted(tmp_path.iterdir()) == before


def test_a_fork_of_a_session_with_no_run_says_so(store: SessionStore, session_path: Path) -> None:
    with pytest.raises(ForkRefusedError, match="it has no run yet"):
        fork_session(session_path, session_path.with_name("f.agent.jsonl"), through=1)


def test_before_publish_runs_once_the_fork_is_whole_and_its_failure_publishes_nothing(
    three_runs: Path, tmp_path: Path
) -> None:
    target = tmp_path / "fork.agent.jsonl"
    seen: list[list[str]] = []

    def moved_away() -> None:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        raise OSError("refused")

    with pytest.raises(OSError, match="refused"):
        fork_session(three_runs, target, through=1, before_publish=moved_away)
    (names,) = seen
    assert [n for n in names if n.startswith(".fork.agent.jsonl.fork.")]  # the whole draft
    assert not target.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no draft left


WRITE_FILE = ToolIdentity(name="write_file", version="1", source="builtin")


def _write_run(store: SessionStore, before: str, after: str) -> None:
    """A completed run whose write_file intent names the blobs `before` and `after`."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Write it"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("w", "write_file", {"path": "a.txt", "content": "x"})]))
    change = {"path": "a.txt", "before": before, "after": after, "mode": 420, "kept": True}
    intent = run.intent("w", WRITE_FILE, {"path": "a.txt", "content": "x", "file": change})
    store.commit([intent])
    store.commit([run.result(intent, "overwrote a.txt")])
    store.commit(run.attempt())
    store.commit(run.answer("Done."))
    store.commit(run.finish())


def test_a_fork_takes_the_file_history_blobs_its_lines_name_and_no_others(
    store: SessionStore, session_path: Path, tmp_path: Path
) -> None:
    blobs = FileStore.for_session(store.header.id)
    first, second, third = (blobs.put(data) for data in (b"one\n", b"two\n", b"three\n"))
    _write_run(store, first, second)
    _write_run(store, second, third)
    store.close()

    header = fork_session(session_path, tmp_path / "fork.agent.jsonl", through=1)
    fork = FileStore.for_session(header.id)
    assert [fork.has(d) for d in (first, second, third)] == [True, True, False]
    assert fork.get(second) == b"two\n"
    assert blobs.get(third) == b"three\n"  # the source keeps its own
