"""The system prompt: a notebook's says what a model needs there (only of the tools a run
offers), and the file records the text once, and again only when it changes
(docs/spec.md §7), so it says what the model was told."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.agent import AgentLoop, LoopConfig, notebook_system_prompt
from tiny_agent_nb.provider import Provider, ProviderConfig
from tiny_agent_nb.session import (
    HeaderInit,
    InvalidTransactionError,
    SessionStore,
    load_session,
    new_id,
)
from tiny_agent_nb.session import facts as f
from tiny_agent_nb.tools import ToolContext, builtin_registry

from helpers.openai_server import OpenAIServer, text_reply
from helpers.scenario import Run

DAY = datetime.date(2026, 3, 14)


def prompt(day: datetime.date = DAY, **options: Any) -> str:
    settings: dict[str, Any] = {
        "workspace": "/home/me/analysis",
        "tools": builtin_registry().names,
        "today": day,
        "user_cells": True,
    }
    return notebook_system_prompt(**{**settings, **options})


def test_the_notebook_prompt_says_the_date_the_workspace_and_what_each_tool_means() -> None:
    text = prompt()
    assert text.startswith(
        "You are an agent working in a Jupyter notebook, for the person using it. "
        "Today is 2026-03-14.\nThe workspace is /home/me/analysis: read_file, list_files, "
        "grep, write_file, edit_file act inside it"
    )
    for said in (
        "`python` runs code in the notebook's kernel, in the user's namespace: their "
        "variables are yours to read and change, and what you define stays for their next "
        "cells.",
        "`propose_cell` puts code in a new cell below the agent cell for the user to review "
        "and run (in a run resumed with the Resume button it shows the code for them to "
        "copy instead; its result says which)",
        "[Cells the user ran since the previous agent cell, oldest first]",
        "its effect may or may not have happened, so check before doing it again",
    ):
        assert said in text
    assert len(text) < 1500


def test_a_tool_the_run_does_not_offer_is_not_mentioned() -> None:
    text = prompt(tools=("read_file", "grep"), user_cells=False)
    assert "read_file, grep act inside it" in text
    for absent in ("python", "propose_cell", "list_variables", "write_file", "Cells the user"):
        assert absent not in text


def _loop(store: SessionStore, server: OpenAIServer, system_prompt: str) -> AgentLoop:
    provider = Provider(ProviderConfig(model="test/model", base_url=server.base_url))
    return AgentLoop(
        store,
        provider,
        builtin_registry(),
        ToolContext(workspace=store.path.parent),
        LoopConfig(ProviderConfig("test/model", provider="p"), system_prompt=system_prompt),
    )


def _told(path: Path) -> list[tuple[int, str]]:
    """(line, content) of each systemPrompt record, and each stepAttempt's line."""
    told = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()[1:], start=2):
        if '"type":"systemPrompt"' in line:
            assert '"type":"stepAttempt"' in line  # committed with the request that sends it
            told.append((number, line))
    return told


def test_the_prompt_is_recorded_once_and_again_when_it_changes(
    server: OpenAIServer, tmp_path: Path
) -> None:
    path = tmp_path / "nb.agent.jsonl"
    init = HeaderInit(cwd=str(tmp_path), provider="p", model="m", environment_identity="w")
    monday, tuesday = prompt(DAY), prompt(DAY + datetime.timedelta(days=1))
    server.enqueue(*(text_reply(f"answer {n}") for n in range(4)))
    for day_prompt in (monday, monday, tuesday):  # a kernel per cell: each reads the file
        with SessionStore.open(path, create=init) as store:
            loop = _loop(store, server, day_prompt)
            loop.run("hello")
            loop.close()
    assert [r.body["messages"][0]["content"] for r in server.requests] == [
        monday,
        monday,
        tuesday,
    ]
    assert len(_told(path)) == 2
    assert load_session(path).system_prompt == tuesday
    # No system message at all is recorded as such: the file must not say one was sent.
    with SessionStore.open(path) as store:
        loop = _loop(store, server, "")
        loop.run("plain")
        loop.close()
    assert load_session(path).system_prompt == ""
    assert server.requests[-1].body["messages"][0]["role"] == "user"


def test_a_refused_transaction_leaves_the_recorded_prompt_as_it_was(
    session_path: Path, header_init: HeaderInit
) -> None:
    with SessionStore.open(session_path, create=header_init) as store:
        run = Run(environment=header_init.environment_identity)
        store.commit(run.start("go"))
        store.commit(
            [
                f.NewFact(f.SystemPrompt(operationId=run.operation_id, content="first")),
                *run.attempt(),
            ]
        )
        with pytest.raises(InvalidTransactionError):
            store.commit(
                [
                    f.NewFact(f.SystemPrompt(operationId=run.operation_id, content="second")),
                    *run.attempt(),
                ]
            )
        assert store.system_prompt() == "first"
        with pytest.raises(InvalidTransactionError, match="unknown operation"):
            store.commit([f.NewFact(f.SystemPrompt(operationId=new_id(), content="nobody's"))])
        assert store.load().system_prompt == "first"
    assert load_session(session_path).system_prompt == "first"
