"""Builds the transactions of realistic runs, the way the agent loop commits them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tiny_agent_nb.session import (
    NewFact,
    ReplayPolicy,
    SessionStore,
    ToolCall,
    ToolIdentity,
    ToolIntent,
    ToolStarted,
    new_id,
)
from tiny_agent_nb.session import facts as f

DIGEST = "sha256:" + "ab" * 32
READ_FILE = ToolIdentity(name="read_file", version="1", source="builtin")
BASH = ToolIdentity(name="bash", version="1", source="builtin")


def intent_result(intent: ToolIntent, content: str, outcome: str = "completed") -> NewFact:
    """The ToolResult settling `intent`, a pending intent of a loaded state."""
    return f.tool_result(
        tool_started_id=intent.id,
        result_entry_id=intent.result_entry_id,
        tool_call_id=intent.tool_call_id,
        content=content,
        outcome=outcome,  # type: ignore[arg-type]
    )


@dataclass
class Run:
    """One operation driven step by step. Each method returns one transaction."""

    environment: str
    operation_id: str = field(default_factory=new_id)
    step: int = 0
    attempt_id: str | None = None

    def start(self, prompt: str) -> list[NewFact]:
        entry_id = new_id()
        return [f.user_message(prompt, id=entry_id), f.run_started(self.operation_id, entry_id)]

    def attempt(
        self, attempt: int = 1, *, provider: str = "openrouter", model: str = "test/model"
    ) -> list[NewFact]:
        if attempt == 1:
            self.step += 1
        self.attempt_id = new_id()
        return [
            f.NewFact(
                f.StepAttempt(
                    operationId=self.operation_id,
                    step=self.step,
                    attempt=attempt,
                    provider=provider,
                    model=model,
                    configurationDigest=DIGEST,
                ),
                self.attempt_id,
            )
        ]

    def answer(
        self,
        content: str | None,
        calls: Sequence[tuple[str, str, dict[str, Any]]] = (),
        cost: float | None = 0.001,
    ) -> list[NewFact]:
        assert self.attempt_id is not None
        tool_calls = [ToolCall(id=cid, name=name, arguments=args) for cid, name, args in calls]
        return [
            f.assistant_message(
                self.attempt_id,
                content=content,
                tool_calls=tool_calls,
                finish_reason="tool_calls" if calls else "stop",
            ),
            f.usage(attempt_id=self.attempt_id, input_tokens=100, output_tokens=10, cost=cost),
        ]

    def intent(
        self,
        call_id: str,
        tool: ToolIdentity,
        arguments: dict[str, Any],
        *,
        replay_policy: ReplayPolicy | None = None,
    ) -> NewFact:
        """The ToolStarted of `call_id`; its replay policy `safeRead` for read_file and
        `never` for the others unless `replay_policy` says otherwise."""
        assert self.attempt_id is not None
        if replay_policy is None:
            replay_policy = "safeRead" if tool.name == "read_file" else "never"
        return f.tool_started(
            self.operation_id,
            self.attempt_id,
            call_id,
            tool=tool,
            arguments=arguments,
            replay_policy=replay_policy,
            environment_identity=self.environment,
        )

    @staticmethod
    def result(intent: NewFact, content: str, outcome: str = "completed") -> NewFact:
        body = intent.body
        assert isinstance(body, ToolStarted) and intent.id is not None
        return f.tool_result(
            tool_started_id=intent.id,
            result_entry_id=body.resultEntryId,
            tool_call_id=body.toolCallId,
            content=content,
            outcome=outcome,  # type: ignore[arg-type]
        )

    def finish(self, outcome: str = "completed") -> list[NewFact]:
        return [f.NewFact(f.OperationFinished(operationId=self.operation_id, outcome=outcome))]  # type: ignore[arg-type]


def complete_run(store: SessionStore, prompt: str = "List the files") -> Run:
    """user+runStarted, attempt, tool call answered, final answer, finished: 8 commits."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start(prompt))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("call_1", "read_file", {"path": "README.md"})]))
    intent = run.intent("call_1", READ_FILE, {"path": "README.md"})
    store.commit([intent])
    store.commit([run.result(intent, "# Demo\n")])
    store.commit(run.attempt())
    store.commit(run.answer("Done."))
    store.commit(run.finish())
    return run
