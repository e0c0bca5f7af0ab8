"""`tiny-agent-nb usage FILE`: tokens and cost per run and the totals; an unknown cost is
never shown as 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.session import (
    SessionStore,
    load_session,
)
from tiny_agent_nb.session import facts as f

from helpers.cli_helpers import (
    FIXTURES,
    cli,
    untouched,
)
from helpers.scenario import Run, complete_run


def _usage(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    with untouched(path):
        code, out, err = cli(capsys, "usage", str(path), "--json")
    assert (code, err) == (0, "")
    usage: dict[str, Any] = json.loads(out)["usage"]
    return usage


TOKEN_KEYS = ("inputTokens", "outputTokens", "reasoningTokens", "cachedInputTokens")


def test_usage_totals_are_the_session_totals(
    capsys: pytest.CaptureFixture[str], three_runs: Path
) -> None:
    usage = _usage(capsys, three_runs)
    state = load_session(three_runs)

    totals = usage["totals"]
    assert {k: totals[k] for k in (*TOKEN_KEYS, "cost")} == state.summary()["usage"]
    assert totals["usageRecords"] == state.totals.priced + state.totals.unpriced
    for key in TOKEN_KEYS:
        assert sum(r[key] for r in usage["runs"]) == totals[key]
    assert [(r["kind"], r["status"]) for r in usage["runs"]] == [
        ("run", "completed"),
        ("run", "failed"),
        ("run", "open"),
    ]
    costs = [r["cost"] for r in usage["runs"]]
    assert costs == [0.002, None, None]  # unknown stays null, never 0
    assert totals["cost"] == 0.002
    assert totals["unpricedRecords"] == 2


def test_usage_table_says_unknown_not_zero(
    capsys: pytest.CaptureFixture[str], three_runs: Path
) -> None:
    with untouched(three_runs):
        code, out, _ = cli(capsys, "usage", str(three_runs))

    assert code == 0
    rows = {line.split()[2]: line for line in out.splitlines() if line[:1].isdigit()}
    assert set(rows) == {"completed", "failed", "open"}
    assert rows["completed"].split()[3:8] == ["200", "20", "0", "0", "$0.002"]
    assert rows["failed"].split()[3:8] == ["7", "0", "0", "0", "unknown"]
    assert rows["open"].split()[7] == "unknown"
    assert "$0.00 " not in out and "$0 " not in out
    total = next(line for line in out.splitlines() if line.split()[:1] == ["total"])
    assert total.split()[1:7] == ["307", "30", "0", "0", "at", "least"]
    assert total.split()[7] == "$0.002"
    assert "total cost   at least $0.002 (2 of 4 usage records have no cost)" in out
    assert "not counted as $0" in out


def test_usage_counts_tool_usage_in_its_run(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = FIXTURES / "usage-ledger.jsonl"
    expected = json.loads(fixture.with_suffix(".expected.json").read_text("utf-8"))

    usage = _usage(capsys, fixture)

    totals = usage["totals"]
    assert {k: totals[k] for k in (*TOKEN_KEYS, "cost")} == expected["summary"]["usage"]
    first, second, third = usage["runs"]
    # attempt $0.1 + web_search tool $0.2, plus an attempt of unknown cost: a lower bound
    assert first["cost"] == pytest.approx(0.3)
    assert (first["usageRecords"], first["unpricedRecords"]) == (3, 1)
    assert second["cost"] == pytest.approx(0.0000423)  # the billed failed attempt counts
    assert third["cost"] is None


def test_usage_of_only_unpriced_records_is_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = FIXTURES / "usage-cost-unknown.jsonl"

    assert _usage(capsys, fixture)["totals"]["cost"] is None
    _, out, _ = cli(capsys, "usage", str(fixture))
    assert "total cost   unknown (the provider reported no cost)" in out
    assert "$0" not in out.replace("(not counted as $0.00)", "")


def test_usage_notes_an_attempt_in_flight(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = FIXTURES / "pending-attempt.jsonl"

    usage = _usage(capsys, fixture)
    _, out, _ = cli(capsys, "usage", str(fixture))

    assert usage["runs"][0]["unreportedAttempts"] == 1
    assert "1 attempt(s) still pending, with no usage record" in out


def test_usage_of_an_empty_session(capsys: pytest.CaptureFixture[str], store: SessionStore) -> None:
    usage = _usage(capsys, store.path)

    assert usage["runs"] == []
    assert usage["totals"]["cost"] == 0


def test_a_run_whose_requests_all_failed_shows_no_usage_not_zeros(
    capsys: pytest.CaptureFixture[str], store: SessionStore, session_path: Path
) -> None:
    complete_run(store)  # $0.002 of usage
    failed = Run(environment=store.header.environmentIdentity)
    store.commit(failed.start("Hi"))
    store.commit(failed.attempt())
    assert failed.attempt_id is not None
    error = f.attempt_failed(failed.attempt_id, kind="network", message="refused", retryable=False)
    store.commit(
        [
            error,
            f.NewFact(
                f.OperationFinished(
                    operationId=failed.operation_id, outcome="failed", detail="refused"
                )
            ),
        ]
    )

    code, out, _ = cli(capsys, "usage", str(session_path))

    assert code == 0
    (row,) = [line for line in out.splitlines() if line.startswith("2 ")]
    assert row.split()[1:8] == ["run", "failed", "-", "-", "-", "-", "-"], row
    assert "-            no usage reported: no request of that run was answered" in out
    assert "total cost   $0.002" in out  # the session's total is still the first run's
