"""One tool call of a run, and the replay of a recorded read after a crash.

Every result carrying untrusted text is built by `ToolStep._result`, which makes it safe
to keep (valid Unicode, secrets redacted: `clean_text`); the file, model and screen get
that, never the raw output. A call's arguments are kept and shown redacted too, but the
tool gets them as the model sent them: a redaction changes what is written, never what a
tool does (docs/spec.md §5). A call whose recorded arguments differ from those it ran
with cannot be run again from the file: its intent says `never`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Literal

from pydantic import ValidationError

from ..redaction import hidden_secrets, redact, redact_json
from ..session import (
    MAX_JSON_DEPTH,
    Approval,
    AssistantMessage,
    NewFact,
    SessionStore,
    ToolCall,
    ToolIdentity,
    ToolIntent,
    ToolOutcome,
    ToolStarted,
)
from ..session import facts as f
from ..tools import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolRegistry,
    ToolUsage,
    clean_text,
)
from ._planner import REPLAY_FAILED_RESULT, REPLAY_TIMED_OUT_RESULT, intent_result
from ._types import LoopObserver

AskFn = Callable[[str, Mapping[str, Any]], bool]

log = logging.getLogger("tiny_agent_nb.agent")


class ToolStep:
    def __init__(
        self,
        store: SessionStore,
        tools: ToolRegistry,
        context: ToolContext,
        approval: Approval,
        ask: AskFn | None,
    ) -> None:
        self._store = store
        self._tools = tools
        self._context = context
        self._approval = approval
        self._ask = ask
        self.environment = str(context.workspace)
        # The arguments the model sent, by call id, for the calls of the answer being run
        # whose arguments `clean_message` redacted: what their tools are given.
        self._sent: dict[str, dict[str, Any]] = {}

    def clean(self, text: str) -> str:
        """`text` as it may be kept."""
        return clean_text(text, self._context.secrets)

    def clean_message(self, message: AssistantMessage) -> AssistantMessage:
        """The model's answer with every secret redacted before it is committed (a model
        that read the key would put it in the file); the arguments as sent are kept aside
        for `run`."""
        self._sent = {}
        secrets = hidden_secrets(self._context.secrets)
        if not secrets:
            return message

        def text(value: str | None) -> str | None:
            return None if value is None else redact(value, secrets)

        calls = []
        for call in message.toolCalls:
            kept = call.model_copy(
                update={
                    "name": redact(call.name, secrets),
                    "arguments": redact_json(call.arguments, secrets),
                    "invalidArguments": text(call.invalidArguments),
                }
            )
            if kept.arguments != call.arguments:
                self._sent[call.id] = call.arguments
            calls.append(kept)
        return message.model_copy(
            update={
                "content": text(message.content),
                "reasoning": text(message.reasoning),
                "refusal": text(message.refusal),
                "toolCalls": tuple(calls),
            }
        )

    # ------------------------------------------------------------------ a run's call
    def run(
        self, operation_id: str, attempt_id: str, call: ToolCall, observer: LoopObserver
    ) -> None:
        tool = self._tools.get(call.name)
        arguments: Mapping[str, Any] = call.arguments
        refusal: str | None = None
        outcome: Literal["completed", "error", "denied"] = "error"
        if tool is None:
            known = ", ".join(self._tools.names) or "none"
            refusal = f"Unknown tool {call.name!r}. Available tools: {known}."
        elif call.invalidArguments is not None:
            refusal = (
                f"The arguments of this {call.name} call are not a JSON object this session can "
                f"keep (an object nested at most {MAX_JSON_DEPTH} levels deep, finite numbers), "
                f"so it did not run. Received: {call.invalidArguments[:500]}"
            )
        else:
            try:
                arguments = tool.effective_arguments(self._sent.pop(call.id, call.arguments))
                arguments = tool.prepare(arguments, self._context)
            except ToolArgumentError as exc:
                refusal = f"{exc}. The tool did not run."
            except ToolError as exc:  # what the tool read first refuses it
                refusal = str(exc)
            except Exception as exc:  # a bug in what it read first: as `_execute` says it
                refusal = f"{tool.name} failed: {type(exc).__name__}: {exc}"
            else:
                recorded = redact_json(arguments, self._context.secrets)
                if tool.asks_approval and not self.approved(tool.name, recorded):
                    refusal = f"The user did not allow this {tool.name} call; it did not run."
                    outcome = "denied"
        if refusal is not None:  # intent and result in one transaction: it provably did not run
            intent = self._intent(operation_id, attempt_id, call, arguments, tool)
            result, output = self._result(intent, ToolOutput(refusal, True), outcome)
            self._store.commit([intent, result])
            observer.on_tool_end(call, output, outcome)
            return
        assert tool is not None
        observer.on_tool_ready(call)  # a stop here leaves no intent behind
        intent = self._intent(operation_id, attempt_id, call, arguments, tool)
        self._store.commit([intent])
        observer.on_tool_start(call, recorded)
        output = self._execute(tool, arguments, recorded)
        outcome = "denied" if output.denied else "error" if output.is_error else "completed"
        result, output = self._result(intent, output, outcome)
        # One transaction: a crash cannot keep the result without the usage it reported,
        # nor the usage of a call whose result was lost (that one is settled interrupted).
        self._store.commit([result, *_usage_facts(intent, output.usage)])
        observer.on_tool_end(call, output, outcome)

    def approved(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Whether a call of `tool` that changes things may run, as `approval` says."""
        if self._approval == "auto":
            return True
        if self._approval == "deny" or self._ask is None:
            return False
        return self._ask(tool, arguments)

    def rerun(
        self, operation_id: str, intent: ToolIntent, observer: LoopObserver, *, allowed: bool
    ) -> ToolOutcome:
        """Run a recorded call again for a replayed run (docs/spec.md §12); when not
        `allowed`, intent and `denied` result in one transaction."""
        tool = self._tools.get(intent.tool.name)
        if tool is None:  # the caller built the registry with it: a bug
            raise LookupError(f"no tool {intent.tool.name!r} to run again")
        call = ToolCall(id=intent.tool_call_id, name=intent.tool.name, arguments=intent.arguments)
        started = f.tool_started(
            operation_id,
            intent.attempt_id,
            intent.tool_call_id,
            tool=tool.identity,
            arguments=dict(intent.arguments),
            replay_policy="never",
            environment_identity=self.environment,
        )
        if not allowed:
            refused = ToolOutput(
                "The user did not allow running this call again; it did not run.", True
            )
            result, output = self._result(started, refused, "denied")
            self._store.commit([started, result])
            observer.on_tool_end(call, output, "denied")
            return "denied"
        observer.on_tool_ready(call)
        self._store.commit([started])
        observer.on_tool_start(call, intent.arguments)
        output = self._execute(tool, intent.arguments, intent.arguments)
        outcome: ToolOutcome = (
            "denied" if output.denied else "error" if output.is_error else "completed"
        )
        result, output = self._result(started, output, outcome)
        self._store.commit([result])
        observer.on_tool_end(call, output, outcome)
        return outcome

    def _intent(
        self,
        operation_id: str,
        attempt_id: str,
        call: ToolCall,
        arguments: Mapping[str, Any],
        tool: Tool | None,
    ) -> NewFact:
        """The call's `toolStarted`, its arguments redacted: a call they differ from is not
        the call the file describes, and is never replayed."""
        recorded = redact_json(dict(arguments), self._context.secrets)
        policy = tool.replay_policy if tool and recorded == arguments else "never"
        unknown = ToolIdentity(name=call.name, version="unknown", source="builtin")
        return f.tool_started(
            operation_id,
            attempt_id,
            call.id,
            tool=tool.identity if tool else unknown,
            arguments=recorded,
            replay_policy=policy,
            environment_identity=self.environment,
        )

    # ------------------------------------------------------------------ after a crash
    def replay(self, intent: ToolIntent) -> bool:
        """Run a recorded safeRead intent again and commit its result: False when it fell
        back to `interrupted`. KeyboardInterrupt passes: the caller settles the intent."""
        try:
            tool = self._tools.get(intent.tool.name)
            if tool is None:  # can_replay checked the identity: a registry bug
                raise LookupError(f"no tool {intent.tool.name!r} to replay")
            # Not _execute: an exception here (a bug, MemoryError) is no result of the
            # read; recording it as `replayed` would pass it off as one.
            output = tool.run(dict(intent.arguments), self._context)
            if output.timed_out:
                self._store.commit([intent_result(intent, REPLAY_TIMED_OUT_RESULT, "interrupted")])
                return False
            result, _ = self._result(intent, output, "replayed")
            self._store.commit([result])
            return True
        except Exception:
            # The open operation must close whatever the replay did: a load that fails
            # here would fail again on every later load.
            log.exception("replaying %s %s failed", intent.tool.name, intent.id)
            self._store.commit([intent_result(intent, REPLAY_FAILED_RESULT, "interrupted")])
            return False

    # ------------------------------------------------------------------ shared
    def _result(
        self, intent: NewFact | ToolIntent, output: ToolOutput, outcome: ToolOutcome
    ) -> tuple[NewFact, ToolOutput]:
        """The result entry answering `intent`, and the output as it was kept."""
        output = replace(output, content=self.clean(output.content))
        if isinstance(intent, ToolIntent):
            started_id, entry_id, call_id = intent.id, intent.result_entry_id, intent.tool_call_id
        else:
            body = intent.body
            assert isinstance(body, ToolStarted) and intent.id is not None
            started_id, entry_id, call_id = intent.id, body.resultEntryId, body.toolCallId
        fact = f.tool_result(
            tool_started_id=started_id,
            result_entry_id=entry_id,
            tool_call_id=call_id,
            content=output.content,
            outcome=outcome,
            is_error=output.is_error,
        )
        return fact, output

    def _execute(
        self, tool: Tool, arguments: Mapping[str, Any], recorded: Mapping[str, Any]
    ) -> ToolOutput:
        """`tool` run; a question it asks (`ToolContext.review`) shows the call as
        `recorded`, asked whatever the approval mode (a cell change's diff)."""
        ask, context = self._ask, self._context
        if ask is not None:
            context = replace(context, review=lambda: ask(tool.name, recorded))
        try:
            return tool.run(dict(arguments), context)
        except Exception as exc:  # a tool bug is a result the model sees, not a crash
            return ToolOutput(f"{tool.name} failed: {type(exc).__name__}: {exc}", is_error=True)


def _usage_facts(intent: NewFact, usage: ToolUsage | None) -> list[NewFact]:
    """The `usage` fact a tool reported about itself; none when it reported nothing. A
    report the file cannot hold is dropped with a warning: it is not to fail the run."""
    if usage is None:
        return []
    assert intent.id is not None
    try:
        return [
            f.usage(
                tool_started_id=intent.id,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                reasoning_tokens=usage.reasoning_tokens,
                cached_input_tokens=usage.cached_input_tokens,
                cost=usage.cost,
            )
        ]
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        log.warning("usage reported by tool call %s not kept: %s", intent.id, problems)
        return []
