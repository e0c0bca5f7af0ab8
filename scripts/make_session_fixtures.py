#!/usr/bin/env python3
"""Write the session-format conformance fixtures to schemas/session/fixtures/.

Every fixture is a short script against `SessionBuilder`, which frames facts the way the
store does (seq, ids, timestamps, one transaction per line) and keeps a ledger of what
each *committed* line holds. The expected summary is that ledger: the generator knows
what it built, so it never reads a JSONL file back and holds no general reducer. An error
fixture writes valid lines first, then breaks one line on purpose; the builder remembers
the first broken line, which is the line a loader must name.

    python scripts/make_session_fixtures.py          # rewrite every fixture
    python scripts/make_session_fixtures.py --check  # exit 1 if a file on disk is stale

Output is byte-for-byte deterministic: ids come from a per-fixture counter, clocks are fixed.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "schemas" / "session" / "fixtures"

FORMAT_VERSION = 2
CREATED_AT = 1787371200000  # header createdAt; a fact's `at` is CREATED_AT + 7 * seq
MS_PER_SEQ = 7
WORKSPACE = "/home/user/demo"
PROVIDER = "openrouter"
MODEL = "deepseek/deepseek-v4-flash-0731"
BASE_URL = "https://openrouter.ai/api/v1"
# Any fixed digest would do; this is the one the shared examples carry.
CONFIGURATION_DIGEST = "sha256:8d067389a95fca745838e3ffd276fd93e62449185d34f1722a7a3b0679cf5a8c"
INTERRUPTED = (
    "Interrupted: the process stopped after this tool started. Its effect may or may not"
    " have happened; the result is unknown. It was not run again."
)

# A kernel as it records itself (docs/spec.md §9): pid, host, when its process started.
HOST = "laptop"
KERNEL_ID = "5f0c2a4e-3b1d-4c8e-9a7f-2d6b1e0c9f3a"
NOTEBOOK = "analysis.ipynb"
KERNEL_NOTICE = (
    "[Kernel restarted] The notebook's kernel restarted: this conversation goes on in a new"
    " Python process, started 2026-08-22 04:01:00 UTC. Gone with the old one: the names"
    " earlier `python` calls defined (primes), and the user's variables, until the user runs"
    " their cells again. Files on disk are unchanged."
)

Fact = dict[str, Any]
Damage = Callable[[list[Fact]], None]


# --- canonical values -------------------------------------------------------------------


def canonical_json(value: object) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256_tag(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def encode_line(value: object) -> str:
    # NaN stays allowed here only so that the nan-cost fixture can write the bad literal.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def uuid7(ms: int, noise: bytes) -> str:
    """A UUIDv7: 48-bit ms timestamp, version 7, 12 + 62 bits from `noise`, variant 10."""
    rand_a = int.from_bytes(noise[:2], "big") & 0xFFF
    rand_b = int.from_bytes(noise[2:10], "big") & ((1 << 62) - 1)
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b))


class IdSource:
    """Deterministic ids: one millisecond per id, the random bits hashed from seed + counter."""

    def __init__(self, seed: str) -> None:
        self._seed = seed
        self._count = 0

    def __call__(self) -> str:
        self._count += 1
        noise = hashlib.sha256(f"{self._seed}/{self._count}".encode()).digest()
        return uuid7(CREATED_AT + self._count, noise)


# --- the payloads of format v2, as this oracle writes them -------------------------------

# Every payload a line holds, by name: its members in the order the line holds them.
# `member=value` is a constant every payload of the row holds (a record's `type`, an
# entry's, a message's `role`). `payload()` writes a row: a member the call leaves out
# is absent from the line (the optional ones), one given as None is written null. A new
# kind of fact is a row here, plus a builder method when a scenario needs what it does
# to the ledger.
PAYLOADS: dict[str, list[str]] = {
    name: members.split()
    for name, members in {
        "header": "kind=header version id createdAt cwd provider model environmentIdentity",
        # records
        "runStarted": "type=runStarted operationId operationKind inputEntryId"
        " resumesOperationId replaysOperationId rewindsOperationId options cellId",
        "stepAttempt": "type=stepAttempt operationId step attempt provider model"
        " configurationDigest",
        "attemptFailed": "type=attemptFailed attemptId error retryable",
        "toolStarted": "type=toolStarted operationId attemptId toolCallId tool arguments"
        " replayPolicy environmentIdentity resultEntryId replayKey",
        "abortRequested": "type=abortRequested operationId reason",
        "operationFinished": "type=operationFinished operationId outcome detail",
        "systemPrompt": "type=systemPrompt operationId content",
        "contextWindow": "type=contextWindow baseUrl model tokens source attemptId",
        "kernelOpened": "type=kernelOpened pid host startedAt kernelId notebook",
        "fileRestore": "type=fileRestore operationId path from fromMode to toMode",
        # entries
        "user": "type=message message userCells",
        "assistant": "type=message attemptId message",
        "toolResult": "type=message toolStartedId outcome message",
        "compaction": "type=compaction summary throughEntryId attemptId tokensBefore tokensAfter",
        "kernelNotice": "type=kernelNotice kernelOpenedId message",
        # usage
        "usage": "attemptId toolStartedId inputTokens outputTokens reasoningTokens"
        " cachedInputTokens cost",
        # what the facts hold inside them
        "userMessage": "role=user content",
        "assistantMessage": "role=assistant content reasoning refusal toolCalls finishReason",
        "toolMessage": "role=tool toolCallId content isError",
        "toolCall": "id name arguments invalidArguments",
        "tool": "name version source",
        "error": "kind message status",
        "options": "approve tools budget maxSteps model",
    }.items()
}
# What an operation's summary repeats of its runStarted, in this order (docs/session-format.md §7).
OPERATION_SUMMARY = ("options", "cellId", "replaysOperationId", "rewindsOperationId")


def payload(name: str, *values: Any, **members: Any) -> dict[str, Any]:
    """The row `name` of `PAYLOADS`: its constants, then `values` (its first members, in
    the row's order) and `members` (any of the others, by name)."""
    row = PAYLOADS[name]
    constants = dict(member.split("=") for member in row if "=" in member)
    order = [member for member in row if "=" not in member]
    members |= dict(zip(order, values, strict=False))
    assert len(values) <= len(order) and members.keys() <= set(order), name
    return {**constants, **{member: members[member] for member in order if member in members}}


# --- tools, calls, tokens, handles ------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    name: str
    replay_policy: str  # safeRead | never
    source: str = "builtin"
    version: str = "1"

    def identity(self) -> dict[str, str]:
        return payload("tool", self.name, self.version, self.source)


READ_FILE = Tool("read_file", "safeRead")
GREP = Tool("grep", "safeRead")
BASH = Tool("bash", "never")
WRITE_FILE = Tool("write_file", "never")
PYTHON = Tool("python", "never")
ISSUE_SEARCH = Tool("search_issues", "never", source="mcp:github")
WEB_SEARCH = Tool("web_search", "never", source="mcp:exa")


def replay_key(tool: Tool, arguments: dict[str, Any], environment: str) -> str:
    identity = {"tool": tool.identity(), "arguments": arguments, "environmentIdentity": environment}
    return sha256_tag(canonical_json(identity))


@dataclass(frozen=True)
class ToolCall:
    id: str
    tool: Tool
    arguments: dict[str, Any]

    def wire(self) -> dict[str, Any]:
        return payload("toolCall", self.id, self.tool.name, self.arguments)


def call(call_id: str, tool: Tool, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, tool, arguments)


@dataclass(frozen=True)
class Tokens:
    input: int
    output: int
    reasoning: int = 0
    cached: int = 0
    cost: float | None = None


@dataclass(frozen=True)
class Attempt:
    id: str
    operation_id: str


@dataclass(frozen=True)
class Intent:
    id: str
    call: ToolCall
    result_id: str


# --- damage: how error fixtures break one staged line ------------------------------------


def _walk(facts: list[Fact], fact: int, path: str) -> tuple[dict[str, Any], str]:
    *parents, leaf = path.split(".")
    node = facts[fact]
    for key in parents:
        node = node[key]
    return node, leaf


def damaged(path: str, value: object, *, fact: int = 0) -> Damage:
    """Set `path` (dotted keys) of the `fact`-th staged fact to `value`."""

    def apply(facts: list[Fact]) -> None:
        node, leaf = _walk(facts, fact, path)
        node[leaf] = value

    return apply


def removed(path: str, *, fact: int = 0) -> Damage:
    def apply(facts: list[Fact]) -> None:
        node, leaf = _walk(facts, fact, path)
        del node[leaf]

    return apply


# --- the builder --------------------------------------------------------------------------


def _set_status(table: dict[str, dict[str, Any]], key: str, status: str) -> None:
    if key in table:  # broken fixtures may point at ids that were never built
        table[key]["status"] = status


@dataclass
class Ledger:
    """What the committed facts hold, kept as the builder writes them."""

    last_seq: int = 0
    entries: list[str] = field(default_factory=list)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    spent: list[Tokens] = field(default_factory=list)
    # (baseUrl, model) -> the newest contextWindow record's summary, in first-seen order
    windows: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def usage_totals(self) -> dict[str, Any]:
        # A usage fact with a count or cost past 2**53 - 1 reads as no usage (spec §4).
        spent = [t for t in self.spent if believed(t)]
        costs = [t.cost for t in spent if t.cost is not None]
        cost: float | None = round(sum(costs), 12) if costs else (None if spent else 0)
        return {
            "inputTokens": sum(t.input for t in spent),
            "outputTokens": sum(t.output for t in spent),
            "reasoningTokens": sum(t.reasoning for t in spent),
            "cachedInputTokens": sum(t.cached for t in spent),
            "cost": cost,
        }


MAX_REPORTED = 2**53 - 1


def believed(t: Tokens) -> bool:
    counts = (t.input, t.output, t.reasoning, t.cached)
    return all(n <= MAX_REPORTED for n in counts) and (t.cost is None or t.cost <= MAX_REPORTED)


class SessionBuilder:
    """Writes a session the way the store would, one deliberate fact at a time.

    Fact methods *stage* a fact (assigning seq, id and `at`) and note its effect in the
    ledger; `commit()` frames the staged facts as one line. Staged facts that end up torn
    or broken are dropped from the ledger again, so the summary only ever describes
    committed lines.
    """

    def __init__(self, new_id: Callable[[], str]) -> None:
        self.new_id = new_id
        self.session_id = new_id()
        self.header: Fact = payload(
            "header",
            FORMAT_VERSION,
            self.session_id,
            CREATED_AT,
            WORKSPACE,
            PROVIDER,
            MODEL,
            environmentIdentity=WORKSPACE,
        )
        self.lines = [encode_line(self.header)]
        self.tail = b""
        self.seq = 0
        self.ledger = Ledger()
        self._committed = Ledger()
        self._staged: list[Fact] = []
        self._corrupt_line: int | None = None

    # framing

    def commit(self) -> int:
        """Write the staged facts as one transaction line; return its line number."""
        self.lines.append(self._frame_staged())
        self._committed = copy.deepcopy(self.ledger)
        return len(self.lines)

    def take_line(self) -> str:
        """Frame the staged facts without committing them (material for torn/broken lines)."""
        line = self._frame_staged()
        self.ledger = copy.deepcopy(self._committed)
        self.seq = self.ledger.last_seq  # facts that never committed never consumed a seq
        return line

    def _frame_staged(self) -> str:
        assert self._staged, "nothing staged"
        facts, self._staged = self._staged, []
        return encode_line(facts[0] if len(facts) == 1 else facts)

    def commit_corrupt(self, damage: Damage | None = None) -> int:
        """Write the staged facts, after `damage`, as the line a loader must reject."""
        self._staged = copy.deepcopy(self._staged)  # damage must not reach shared arguments
        if damage is not None:
            damage(self._staged)
        return self.write_corrupt_line(self.take_line())

    def write_corrupt_line(self, text: str) -> int:
        assert "\n" not in text
        self.lines.append(text)
        if self._corrupt_line is None:
            self._corrupt_line = len(self.lines)
        return len(self.lines)

    def damage_header(self, damage: Damage) -> None:
        header = copy.deepcopy(self.header)
        damage([header])
        self.lines[0] = encode_line(header)
        self._corrupt_line = 1

    def tear(self, at_text: str | None = None, extra_bytes: int = 0) -> None:
        """Leave the staged transaction as a torn tail: its bytes up to the first `at_text`
        (plus `extra_bytes`), or all of them when `at_text` is None (only the LF is lost)."""
        data = self.take_line().encode()
        keep = len(data) if at_text is None else data.index(at_text.encode()) + extra_bytes
        assert 0 < keep <= len(data)
        self.tail = data[:keep]

    # output

    def file_bytes(self) -> bytes:
        assert not self._staged, "staged facts were never written"
        return "".join(line + "\n" for line in self.lines).encode() + self.tail

    def expected(self) -> dict[str, Any]:
        if self._corrupt_line is not None:
            return {"error": {"type": "SessionCorruptError", "line": self._corrupt_line}}
        done = self._committed
        windows = {"contextWindows": list(done.windows.values())} if done.windows else {}
        return {
            "summary": {
                "sessionId": self.session_id,
                "version": FORMAT_VERSION,
                "lastSeq": done.last_seq,
                "transactionCount": len(self.lines) - 1,
                "tornTailBytes": len(self.tail),
                "entries": list(done.entries),
                "operations": list(done.operations.values()),
                "attempts": list(done.attempts.values()),
                "toolIntents": list(done.intents.values()),
                "usage": done.usage_totals(),
                **windows,
            }
        }

    # facts

    def fact(self, kind: str, body: dict[str, Any], fact_id: str | None = None) -> str:
        """Stage any fact as-is; the methods below build the valid ones."""
        self.seq += 1
        fact_id = fact_id or self.new_id()
        at = CREATED_AT + MS_PER_SEQ * self.seq
        self._staged.append({"kind": kind, "seq": self.seq, "id": fact_id, "at": at, kind: body})
        self.ledger.last_seq = self.seq
        return fact_id

    def record(self, record_type: str, *values: Any, **members: Any) -> str:
        """Stage a record of a type `PAYLOADS` names (see `payload`)."""
        return self.fact("record", payload(record_type, *values, **members))

    def _entry(self, body: dict[str, Any], fact_id: str | None = None) -> str:
        entry_id = self.fact("entry", body, fact_id)
        self.ledger.entries.append(entry_id)
        return entry_id

    def user(self, content: str, **members: Any) -> str:
        return self._entry(payload("user", payload("userMessage", content), **members))

    def assistant(
        self,
        attempt: Attempt,
        content: str | None = None,
        *,
        calls: Sequence[ToolCall] = (),
        reasoning: str | None = None,
        refusal: str | None = None,
        finish_reason: str | None = None,
    ) -> str:
        finish_reason = finish_reason or ("tool_calls" if calls else "stop")
        wire = [c.wire() for c in calls]
        message = payload("assistantMessage", content, reasoning, refusal, wire, finish_reason)
        entry_id = self._entry(payload("assistant", attempt.id, message))
        _set_status(self.ledger.attempts, attempt.id, "settled")
        return entry_id

    def tool_result(self, intent: Intent, content: str, outcome: str = "completed") -> str:
        is_error = outcome in {"error", "interrupted", "denied"}
        message = payload("toolMessage", intent.call.id, content, is_error)
        body = payload("toolResult", intent.id, outcome, message)
        entry_id = self._entry(body, intent.result_id)
        _set_status(self.ledger.intents, intent.id, outcome)
        return entry_id

    def interrupted_result(self, intent: Intent) -> str:
        return self.tool_result(intent, INTERRUPTED, "interrupted")

    def compaction(
        self,
        summary: str,
        through_entry_id: str,
        *,
        attempt: Attempt | None = None,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
    ) -> str:
        """A checkpoint; with `attempt` (and then tokensBefore, tokensAfter when given) it
        settles that attempt."""
        if attempt is None:
            return self._entry(payload("compaction", summary, through_entry_id))
        after = {} if tokens_after is None else {"tokensAfter": tokens_after}
        members = (summary, through_entry_id, attempt.id, tokens_before)
        entry_id = self._entry(payload("compaction", *members, **after))
        _set_status(self.ledger.attempts, attempt.id, "settled")
        return entry_id

    def run_started(self, input_entry_id: str, options: dict[str, Any] | None = None) -> str:
        given = {} if options is None else {"options": options}
        return self.operation_started("run", inputEntryId=input_entry_id, **given)

    def operation_started(self, kind: str, **members: Any) -> str:
        """runStarted of an operation of `kind`; `members` its others (inputEntryId is null
        unless given; options only when given: files written before the member existed
        have none)."""
        operation_id = self.new_id()
        members = {"inputEntryId": None} | members
        self.record("runStarted", operationId=operation_id, operationKind=kind, **members)
        summary = {"id": operation_id, "kind": kind, "status": "open"}
        summary |= {k: members[k] for k in OPERATION_SUMMARY if k in members}
        self.ledger.operations[operation_id] = summary
        return operation_id

    def step_attempt(self, operation_id: str, step: int, attempt: int = 1) -> Attempt:
        members = (operation_id, step, attempt, PROVIDER, MODEL, CONFIGURATION_DIGEST)
        attempt_id = self.record("stepAttempt", *members)
        self.ledger.attempts[attempt_id] = {
            "id": attempt_id,
            "operationId": operation_id,
            "status": "pending",
        }
        return Attempt(attempt_id, operation_id)

    def attempt_failed(
        self,
        attempt: Attempt,
        kind: str,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
    ) -> str:
        error = payload("error", kind, message, **({} if status is None else {"status": status}))
        failed_id = self.record("attemptFailed", attempt.id, error, retryable)
        _set_status(self.ledger.attempts, attempt.id, "failed")
        return failed_id

    def tool_started(
        self, attempt: Attempt, tool_call: ToolCall, operation_id: str | None = None
    ) -> Intent:
        """The intent of a call of `attempt`, in its operation, or (a replay's) in
        `operation_id`."""
        tool, arguments = tool_call.tool, dict(tool_call.arguments)
        result_id = self.new_id()
        intent_id = self.record(
            "toolStarted",
            operation_id or attempt.operation_id,
            attempt.id,
            tool_call.id,
            tool.identity(),
            arguments,
            tool.replay_policy,
            WORKSPACE,
            result_id,
            replay_key(tool, arguments, WORKSPACE),
        )
        self.ledger.intents[intent_id] = {
            "id": intent_id,
            "tool": tool.name,
            "replayPolicy": tool.replay_policy,
            "status": "pending",
        }
        return Intent(intent_id, tool_call, result_id)

    def usage(self, target: Attempt | Intent, tokens: Tokens) -> str:
        key = "attemptId" if isinstance(target, Attempt) else "toolStartedId"
        body = payload(
            "usage",
            **{key: target.id},
            inputTokens=tokens.input,
            outputTokens=tokens.output,
            reasoningTokens=tokens.reasoning,
            cachedInputTokens=tokens.cached,
            cost=tokens.cost,
        )
        usage_id = self.fact("usage", body)
        self.ledger.spent.append(tokens)
        return usage_id

    def context_window(
        self,
        tokens: int | None,
        source: str,
        *,
        attempt: Attempt | None = None,
        base_url: str = BASE_URL,
        model: str = MODEL,
    ) -> str:
        told = {} if attempt is None else {"attemptId": attempt.id}
        window_id = self.record("contextWindow", base_url, model, tokens, source, **told)
        summary = {"baseUrl": base_url, "model": model, "tokens": tokens, "source": source}
        self.ledger.windows[base_url, model] = summary
        return window_id

    def kernel_opened(self, pid: int, *, started_at: int = CREATED_AT - 60_000) -> str:
        """A kernel opened the session for writing: another pid (or start) is another
        process."""
        return self.record("kernelOpened", pid, HOST, started_at, KERNEL_ID, NOTEBOOK)

    def kernel_notice(self, kernel_opened_id: str, content: str = KERNEL_NOTICE) -> str:
        message = payload("userMessage", content)
        return self._entry(payload("kernelNotice", kernel_opened_id, message))

    def abort_requested(self, operation_id: str, reason: str) -> str:
        return self.record("abortRequested", operation_id, reason)

    def operation_finished(
        self, operation_id: str, outcome: str = "completed", detail: str | None = None
    ) -> str:
        given = () if detail is None else (detail,)
        finished_id = self.record("operationFinished", operation_id, outcome, *given)
        _set_status(self.ledger.operations, operation_id, outcome)
        return finished_id

    # scenes: the transactions the agent loop commits, in its usual grouping

    def start_run(self, prompt: str) -> str:
        """[user entry, runStarted] in one line; returns the operation id."""
        operation_id = self.run_started(self.user(prompt))
        self.commit()
        return operation_id

    def model_turn(
        self,
        operation_id: str,
        step: int,
        content: str | None = None,
        *,
        calls: Sequence[ToolCall] = (),
        tokens: Tokens | None = None,
        attempt: int = 1,
        reasoning: str | None = None,
        refusal: str | None = None,
    ) -> Attempt:
        """stepAttempt, then [assistant entry, usage] once the response settled."""
        handle = self.step_attempt(operation_id, step, attempt)
        self.commit()
        self.assistant(handle, content, calls=calls, reasoning=reasoning, refusal=refusal)
        if tokens is not None:
            self.usage(handle, tokens)
        self.commit()
        return handle

    def run_tool(
        self,
        attempt: Attempt,
        tool_call: ToolCall,
        output: str,
        outcome: str = "completed",
        *,
        tokens: Tokens | None = None,
    ) -> Intent:
        """toolStarted (the intent), then [tool result, usage] after the effect."""
        intent = self.tool_started(attempt, tool_call)
        self.commit()
        self.tool_result(intent, output, outcome)
        if tokens is not None:
            self.usage(intent, tokens)
        self.commit()
        return intent

    def finish(
        self, operation_id: str, outcome: str = "completed", detail: str | None = None
    ) -> int:
        self.operation_finished(operation_id, outcome, detail)
        return self.commit()

    def exchange(self, prompt: str, answer: str, tokens: Tokens | None = None) -> str:
        """A whole tool-less run (4 lines); returns the operation id."""
        operation_id = self.start_run(prompt)
        self.model_turn(operation_id, 1, answer, tokens=tokens)
        self.finish(operation_id)
        return operation_id


# --- registry -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fixture:
    name: str
    about: str
    data: bytes
    expected: dict[str, Any]


# A build returns None (the builder holds the file) or raw bytes that hold no session.
Build = Callable[[SessionBuilder], bytes | None]
_SCENARIOS: list[tuple[str, str, Build, tuple[str, ...]]] = []


def scenario(about: str, *, ids: tuple[str, ...] = ()) -> Callable[[Build], Build]:
    """Register a fixture named after the function; `ids` replaces the id counter."""
    assert "|" not in about

    def register(build: Build) -> Build:
        _SCENARIOS.append((build.__name__.replace("_", "-"), about, build, ids))
        return build

    return register


def make_fixture(name: str, about: str, build: Build, ids: tuple[str, ...]) -> Fixture:
    session = SessionBuilder(iter(ids).__next__ if ids else IdSource(name))
    raw = build(session)
    if raw is not None:
        return Fixture(name, about, raw, {"error": {"type": "NotASessionError"}})
    return Fixture(name, about, session.file_bytes(), session.expected())


# --- the worked examples the format was designed with, rebuilt from their ids ---------------

COMPLETED_RUN_IDS = (
    "01a22960-953b-7b8c-9834-3e442e43865b",
    "01a22960-953c-7ca6-a2a1-d8dc8ae0f710",
    "01a22960-953d-7df9-a05f-b558151fc4a5",
    "01a22960-953e-7352-9278-4d85563253b7",
    "01a22960-953f-782b-b6c8-393ed0b7f2c4",
    "01a22960-9540-71a2-a478-f87df4ba892d",
    "01a22960-9541-7c07-90f0-fc8726553d07",
    "01a22960-9542-72bb-8332-ba90d31cd19d",
    "01a22960-9543-79e3-941f-c87decf9503c",
    "01a22960-9544-7c3e-93a2-763f5d477d15",
    "01a22960-9545-7f96-b70a-61cbb1d0624d",
    "01a22960-9546-73e0-89c2-43fb29f80905",
    "01a22960-9547-7c13-851d-c10d3954a3e4",
    "01a22960-9548-7b52-a2f9-0bea0c0fd589",
    "01a22960-9549-7e25-9d2b-8e5b272972a1",
)
KILLED_DURING_BASH_IDS = (
    "01a22960-954a-7580-9880-c1fb9df33eda",
    "01a22960-954b-7bd4-9755-3e40585e9431",
    "01a22960-954c-74d6-b3b0-c39959e869af",
    "01a22960-954d-777e-8c85-1d147cb39cc5",
    "01a22960-954e-7641-9214-4fa4d0f3d1a8",
    "01a22960-954f-7d1c-8666-b54df7e880ba",
    "01a22960-9550-7c3b-964a-a92ab67a8a0c",
    "01a22960-9551-79b1-8980-da09f0d9f795",
    "01a22960-9552-7e74-9aca-54c60d12c65d",
    "01a22960-9553-7fce-b860-99824edf69c6",
)


@scenario(
    "shared example: a run with read_file + bash, two steps, completed", ids=COMPLETED_RUN_IDS
)
def completed_run(s: SessionBuilder) -> None:
    op = s.start_run("List the files")
    readme = call("call_r1", READ_FILE, path="README.md")
    listing = call("call_b1", BASH, command="ls -la")
    first = s.model_turn(op, 1, calls=[readme, listing], tokens=Tokens(120, 30, cost=0.00012))
    s.run_tool(first, readme, "# Demo\n")
    s.run_tool(first, listing, "total 0\nREADME.md\n")
    answer = "Done: one file, README.md. 東京 ✓"
    s.model_turn(op, 2, answer, tokens=Tokens(300, 12, 5, 100, 0.0002))
    s.finish(op)


def _killed_during_bash(s: SessionBuilder) -> tuple[str, Intent]:
    op = s.start_run("Deploy: rm old.log && deploy.sh")
    deploy = call("call_d1", BASH, command="rm old.log && ./deploy.sh")
    attempt = s.model_turn(op, 1, calls=[deploy], tokens=Tokens(90, 20, cost=0.0001))
    intent = s.tool_started(attempt, deploy)
    s.commit()
    return op, intent


@scenario(
    "shared example: killed after a bash intent was written; op open, intent pending",
    ids=KILLED_DURING_BASH_IDS,
)
def killed_during_bash(s: SessionBuilder) -> None:
    _killed_during_bash(s)


@scenario(
    "shared example: the same file after recovery: interrupted result + operationFinished",
    ids=KILLED_DURING_BASH_IDS,
)
def killed_during_bash_recovered(s: SessionBuilder) -> None:
    op, intent = _killed_during_bash(s)
    s.interrupted_result(intent)
    s.operation_finished(op, "interrupted")
    s.commit()


# --- valid sessions -------------------------------------------------------------------------


@scenario("a header and nothing else: empty session, cost 0")
def header_only(s: SessionBuilder) -> None:
    pass


@scenario("one transaction holding one fact, written as a bare object")
def single_fact(s: SessionBuilder) -> None:
    s.user("Remember: the staging database is read-only.")
    s.commit()


@scenario("killed with one intent answered and an MCP intent (never) still pending")
def pending_intent(s: SessionBuilder) -> None:
    op = s.start_run("Is issue #12 fixed in the changelog?")
    changelog = call("call_c1", READ_FILE, path="CHANGELOG.md")
    search = call("call_s1", ISSUE_SEARCH, repo="acme/demo", query="#12 crash on empty input")
    first = s.model_turn(op, 1, calls=[changelog, search], tokens=Tokens(210, 44, cost=0.00021))
    s.run_tool(first, changelog, "## 1.2.0\n- Fix crash on empty input (#12)\n")
    s.tool_started(first, search)
    s.commit()


@scenario("killed while the model request was in flight: attempt pending, no usage")
def pending_attempt(s: SessionBuilder) -> None:
    op = s.start_run("Explain the failing test")
    s.step_attempt(op, 1)
    s.commit()


@scenario("planner recovery of a pending attempt: attemptFailed interrupted + op interrupted")
def interrupted_run(s: SessionBuilder) -> None:
    op = s.start_run("Explain the failing test")
    attempt = s.step_attempt(op, 1)
    s.commit()
    message = "the kernel died while the model request was in flight"
    s.attempt_failed(attempt, "interrupted", message, retryable=False)
    s.operation_finished(op, "interrupted")
    s.commit()


@scenario("Ctrl-C during bash: [abortRequested, interrupted result, operationFinished aborted]")
def aborted_run(s: SessionBuilder) -> None:
    op = s.start_run("Run the whole test suite")
    pytest = call("call_t1", BASH, command="pytest -x")
    attempt = s.model_turn(op, 1, calls=[pytest], tokens=Tokens(150, 18, cost=0.00009))
    intent = s.tool_started(attempt, pytest)
    s.commit()
    s.abort_requested(op, "KeyboardInterrupt")
    s.interrupted_result(intent)
    s.operation_finished(op, "aborted")
    s.commit()


@scenario("Ctrl-C while streaming: [abortRequested, attemptFailed aborted, finished aborted]")
def aborted_during_attempt(s: SessionBuilder) -> None:
    op = s.start_run("Write a long essay about logs")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.abort_requested(op, "KeyboardInterrupt")
    s.attempt_failed(attempt, "aborted", "stopped by the user", retryable=False)
    s.operation_finished(op, "aborted")
    s.commit()


@scenario("an interrupted run, then a resume operation (inputEntryId null) that completes")
def resume_after_interrupt(s: SessionBuilder) -> None:
    op = s.start_run("Migrate the database")
    migrate = call("call_m1", BASH, command="./manage.py migrate")
    first = s.model_turn(op, 1, calls=[migrate], tokens=Tokens(180, 25, cost=0.00015))
    intent = s.tool_started(first, migrate)
    s.commit()
    s.interrupted_result(intent)
    s.operation_finished(op, "interrupted")
    s.commit()
    resumed = s.operation_started("resume", resumesOperationId=op)
    s.commit()
    answer = "The migration may have run; I did not rerun it. Check `showmigrations`."
    s.model_turn(resumed, 1, answer, tokens=Tokens(260, 30, cost=0.0002))
    s.finish(resumed)


@scenario("an aborted run resumed: resume of outcome aborted, then completed")
def resume_after_abort(s: SessionBuilder) -> None:
    op = s.start_run("Summarise the design doc")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.abort_requested(op, "KeyboardInterrupt")
    s.attempt_failed(attempt, "aborted", "stopped by the user", retryable=False)
    s.operation_finished(op, "aborted")
    s.commit()
    resumed = s.operation_started("resume", resumesOperationId=op)
    s.commit()
    s.model_turn(resumed, 1, "The design keeps intent before effect.", tokens=Tokens(90, 9))
    s.finish(resumed)


def run_options(approve: str, tools: list[str], budget: float | None) -> dict[str, Any]:
    """A runStarted's `options` (docs/session-format.md §2.3): what the run offered and allowed."""
    return payload("options", approve, tools, budget, 25, MODEL)


ASK_BASH = run_options("ask", ["bash"], 0.05)


@scenario("a run's options recorded; its resume records the same, but the approval it was given")
def run_options_resumed(s: SessionBuilder) -> None:
    op = s.run_started(s.user("Clean the build directory"), ASK_BASH)
    s.commit()
    clean = call("call_c1", BASH, command="rm -rf build")
    s.model_turn(op, 1, calls=[clean], tokens=Tokens(120, 20, cost=0.02))
    s.abort_requested(op, "KeyboardInterrupt")
    s.operation_finished(op, "aborted")
    s.commit()
    resumed = s.operation_started(
        "resume", resumesOperationId=op, options={**ASK_BASH, "approve": "auto"}
    )
    s.commit()
    s.model_turn(resumed, 1, "Left as it was.", tokens=Tokens(150, 5, cost=0.01))
    s.finish(resumed)


@scenario("a pending safeRead intent replayed after a crash: outcome replayed")
def replayed_safe_read(s: SessionBuilder) -> None:
    op = s.start_run("Summarise src/app.py")
    source = call("call_a1", READ_FILE, path="src/app.py")
    first = s.model_turn(op, 1, calls=[source], tokens=Tokens(100, 15, cost=0.00008))
    intent = s.tool_started(first, source)
    s.commit()
    s.tool_result(intent, "def main() -> None:\n    print('hi')\n", "replayed")
    s.operation_finished(op, "interrupted")
    s.commit()


@scenario("a denied tool: [toolStarted, denied result] in one line, then the run completes")
def denied_tool(s: SessionBuilder) -> None:
    op = s.start_run("Free some disk space")
    wipe = call("call_w1", BASH, command="rm -rf ~/*")
    first = s.model_turn(op, 1, calls=[wipe], tokens=Tokens(80, 14, cost=0.00005))
    intent = s.tool_started(first, wipe)
    s.tool_result(intent, "Denied: the user refused this command.", "denied")
    s.commit()
    answer = "Understood, I will not delete anything."
    s.model_turn(op, 2, answer, tokens=Tokens(120, 11, cost=0.00006))
    s.finish(op)


@scenario("attempt 1 times out (no status), attempt 2 gets http 429 retryable, attempt 3 settles")
def retry_after_429(s: SessionBuilder) -> None:
    op = s.start_run("What does this repo do?")
    first = s.step_attempt(op, 1, 1)
    s.commit()
    s.attempt_failed(first, "timeout", "no response within 60 s", retryable=True)
    s.commit()
    second = s.step_attempt(op, 1, 2)
    s.commit()
    message = "429 Too Many Requests: rate limited upstream"
    s.attempt_failed(second, "http", message, retryable=True, status=429)
    s.commit()
    answer = "It is a durable JSONL session store."
    s.model_turn(op, 1, answer, tokens=Tokens(70, 10, cost=0.00004), attempt=3)
    s.finish(op)


@scenario("a non-retryable http 401 ends the run: operationFinished failed with detail")
def failed_run(s: SessionBuilder) -> None:
    op = s.start_run("Hello?")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.attempt_failed(
        attempt, "http", "401 Unauthorized: invalid API key", retryable=False, status=401
    )
    s.operation_finished(op, "failed", "the provider rejected the API key")
    s.commit()


@scenario("the server says the context is too long: the attempt fails as contextLength (400)")
def context_too_long(s: SessionBuilder) -> None:
    op = s.start_run("Summarize the whole log again.")
    attempt = s.step_attempt(op, 1)
    s.commit()
    message = (
        "This model's maximum context length is 8192 tokens. "
        "However, your messages resulted in 9001 tokens."
    )
    s.attempt_failed(attempt, "contextLength", message, retryable=False, status=400)
    s.operation_finished(op, "failed", "the conversation does not fit the model's context window")
    s.commit()


def _big_tool_output() -> str:
    row = '{i:04d}\tpath="src/模块_{i}.py" \\ status=\x1b[32mok\x1b[0m e\u0301 🚀 "q"\r\n'
    return "".join(row.format(i=i) for i in range(400))


@scenario("CJK, emoji, combining marks, U+2028/U+2029, bidi and a 20 KB escaped tool output")
def unicode_and_multi_kb(s: SessionBuilder) -> None:
    prompt = (
        "東京の天気を調べて 👩🏽\u200d💻 — cafe\u0301 ≠ café,\u2028line separator,"
        "\u2029paragraph separator, bidi \u202eevil\u202c, tab\there, NUL\x00end"
    )
    op = s.start_run(prompt)
    log = call("call_u1", READ_FILE, path="logs/ビルド ✓.log")
    first = s.model_turn(
        op, 1, calls=[log], reasoning="先读日志 🧐\u2028然后总结", tokens=Tokens(500, 40, 12)
    )
    output = _big_tool_output()
    assert len(output) >= 20_000
    s.run_tool(first, log, output)
    zalgo = "Z\u0351\u0327a\u0336l\u0315g\u0334o"
    answer = f"ログは正常です ✅ — 400 行、エラーなし。\u2028{zalgo}"
    s.model_turn(op, 2, answer, tokens=Tokens(9000, 60, 0, 8000, 0.0031))
    s.finish(op)


@scenario("several runs: attempt and tool usage, a billed failed attempt, costs null and 0.1+0.2")
def usage_ledger(s: SessionBuilder) -> None:
    op = s.start_run("Search the web for the release date")
    search = call("call_e1", WEB_SEARCH, query="tiny-agent-nb release date")
    first = s.model_turn(op, 1, calls=[search], tokens=Tokens(1000, 200, 50, 300, 0.1))
    s.run_tool(first, search, "2026-08-22", tokens=Tokens(0, 0, cost=0.2))
    s.model_turn(op, 2, "It ships on 2026-08-22.", tokens=Tokens(1400, 20, 0, 1000, None))
    s.finish(op)

    op = s.start_run("And the previous release?")
    dropped = s.step_attempt(op, 1)
    s.commit()
    s.attempt_failed(dropped, "network", "connection reset mid-stream", retryable=True)
    s.usage(dropped, Tokens(500, 10, cost=0.0000123))
    s.commit()
    s.model_turn(op, 1, "2026-05-01.", tokens=Tokens(510, 8, cost=0.00003), attempt=2)
    s.finish(op)

    s.exchange("Thanks", "You're welcome.", Tokens(40, 5, 0, 0, None))


@scenario("usage past 2**53-1 (4,300-digit counts, 1e308 costs): valid, read as no usage")
def usage_out_of_range(s: SessionBuilder) -> None:
    huge = 9 * 10**4299  # 4,300 digits: what a JSON reader still parses; two overflow str()
    s.exchange("Count the stars", "Many.", Tokens(huge, huge, cost=1e308))
    s.exchange("Count them again", "Still many.", Tokens(huge, 18446744073709551615, cost=1e308))
    s.exchange("And the planets?", "Eight.", Tokens(20, 3, cost=0.00002))


@scenario("usage facts exist but none reports a cost: usage.cost is null, not 0")
def usage_cost_unknown(s: SessionBuilder) -> None:
    op = s.start_run("How do I pick a lock?")
    refusal = "I can't help with that."
    s.model_turn(op, 1, refusal=refusal, tokens=Tokens(30, 9, 4, 0, None), reasoning="unsafe")
    s.finish(op)


@scenario("three runs with a compaction entry (throughEntryId) between run 2 and run 3")
def compaction(s: SessionBuilder) -> None:
    s.exchange("Name three primes", "2, 3, 5.", Tokens(20, 6, cost=0.00001))
    s.exchange("And three more", "7, 11, 13.", Tokens(30, 7, cost=0.00001))
    last_answer = s.ledger.entries[-1]
    s.compaction("The user asked for primes; six were listed: 2 to 13.", last_answer)
    s.commit()
    s.exchange("Sum of them?", "41.", Tokens(25, 3, cost=0.00001))


@scenario("a run compacts itself: stepAttempt, then [compaction settling it, usage], then goes on")
def compaction_in_run(s: SessionBuilder) -> None:
    s.exchange("Name three primes", "2, 3, 5.", Tokens(20, 6, cost=0.00001))
    op = s.start_run("Check the config")
    conf = call("call_c1", READ_FILE, path="conf.toml")
    first = s.model_turn(op, 1, calls=[conf], tokens=Tokens(300, 20, cost=0.0002))
    intent = s.run_tool(first, conf, "debug = false\n")
    summarizer = s.step_attempt(op, 2)
    s.commit()
    summary = "Primes 2, 3, 5 were named; conf.toml was read: debug = false."
    s.compaction(summary, intent.result_id, attempt=summarizer, tokens_before=340, tokens_after=60)
    s.usage(summarizer, Tokens(340, 25, cost=0.0001))
    s.commit()
    s.model_turn(op, 3, "Debug is off.", tokens=Tokens(60, 5, cost=0.00003))
    s.finish(op)


@scenario("%agent compact: an operation of kind compaction (inputEntryId null) between runs")
def compaction_operation(s: SessionBuilder) -> None:
    s.exchange("Name three primes", "2, 3, 5.", Tokens(20, 6, cost=0.00001))
    s.exchange("And three more", "7, 11, 13.", Tokens(30, 7, cost=0.00001))
    last_answer = s.ledger.entries[-1]
    op = s.operation_started("compaction")
    s.commit()
    summarizer = s.step_attempt(op, 1)
    s.commit()
    s.compaction("Six primes were listed: 2 to 13.", last_answer, attempt=summarizer)
    s.usage(summarizer, Tokens(80, 12, cost=None))
    s.commit()
    s.finish(op)
    s.exchange("Sum of them?", "41.", Tokens(25, 3, cost=0.00001))


@scenario("a compaction that cuts after a tool call that never started: the run had stopped")
def compaction_after_never_started_call(s: SessionBuilder) -> None:
    op = s.start_run("Run ls")
    listing = call("call_n1", BASH, command="ls")
    s.model_turn(op, 1, calls=[listing])
    s.finish(op, "aborted", "interrupted by the user (KeyboardInterrupt)")
    s.compaction("ls was asked for and never ran.", s.ledger.entries[-1])
    s.commit()


@scenario("a run stopped by its budget: operationFinished budgetLimit with the spend as detail")
def budget_limit_run(s: SessionBuilder) -> None:
    op = s.start_run("List the files")
    listing = call("call_b1", BASH, command="ls")
    first = s.model_turn(op, 1, calls=[listing], tokens=Tokens(120, 30, cost=0.006))
    s.run_tool(first, listing, "README.md\n")
    detail = "budget $0.0050 reached: this run spent $0.0060"
    s.finish(op, "budgetLimit", detail)


@scenario(
    "context windows learned: from the server's listing between runs, then from its "
    "too-long answer (the newer one for the same model and server wins), one per model"
)
def context_window_learned(s: SessionBuilder) -> None:
    s.context_window(131_072, "listing")
    s.commit()
    op = s.start_run("Read the whole log.")
    refused = s.step_attempt(op, 1)
    s.commit()
    message = (
        "This model's maximum context length is 7500 tokens. "
        "However, your messages resulted in 9001 tokens."
    )
    s.attempt_failed(refused, "contextLength", message, retryable=False, status=400)
    s.context_window(7500, "refusal", attempt=refused)
    s.commit()
    s.model_turn(op, 1, "The log is long; here is its end.", attempt=2, tokens=Tokens(7000, 9))
    s.finish(op)
    local = "http://127.0.0.1:11434/v1"
    s.context_window(4096, "listing", base_url=local, model="qwen3:8b")
    s.commit()


@scenario(
    "context windows that read as none: one the user forgot (tokens null) after the refusal "
    "that taught it, and one an older writer took from the server's count of a request "
    "(truncation); the conformance summary lists both as they are"
)
def context_window_forgotten(s: SessionBuilder) -> None:
    op = s.start_run("Read the whole log.")
    refused = s.step_attempt(op, 1)
    s.commit()
    message = (
        "This model's maximum context length is 900 tokens. "
        "However, your messages resulted in 3612 tokens."
    )
    s.attempt_failed(refused, "contextLength", message, retryable=False, status=400)
    s.context_window(900, "refusal", attempt=refused)
    s.commit()
    s.finish(op, "failed", detail="the server refused the request as too long")
    s.context_window(None, "forgotten")
    s.commit()
    s.context_window(2048, "truncation", base_url="http://127.0.0.1:11434/v1", model="qwen3:8b")
    s.commit()


@scenario("a forgotten contextWindow that states tokens")
def context_window_forgotten_with_tokens(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.context_window(None, "forgotten")
    s.commit_corrupt(damaged("record.tokens", 8192))


@scenario("a contextWindow with no tokens from the server's listing")
def context_window_null_listing(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.context_window(8192, "listing")
    s.commit_corrupt(damaged("record.tokens", None))


@scenario("a contextWindow naming a stepAttempt that does not exist")
def context_window_unknown_attempt(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.context_window(8192, "refusal", attempt=Attempt(s.new_id(), s.new_id()))
    s.commit_corrupt()


@scenario("a contextWindow of zero tokens")
def context_window_zero_tokens(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.context_window(8192, "listing")
    s.commit_corrupt(damaged("record.tokens", 0))


@scenario("a contextWindow from a source the format does not name")
def context_window_unknown_source(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.context_window(8192, "listing")
    s.commit_corrupt(damaged("record.source", "guess"))


@scenario("a compaction cutting between a tool call and its result")
def compaction_dirty_cut(s: SessionBuilder) -> None:
    op = s.start_run("Run ls")
    listing = call("call_d1", BASH, command="ls")
    asked = s.model_turn(op, 1, calls=[listing])
    assistant = s.ledger.entries[-1]
    s.run_tool(asked, listing, "README.md\n")
    s.model_turn(op, 2, "One file.")
    s.finish(op)
    s.compaction("ls was run.", assistant)
    s.commit_corrupt()


@scenario("a compaction whose cut is before the previous compaction's cut")
def compaction_backwards_cut(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    first_answer = s.ledger.entries[-1]
    s.exchange("Again", "Hello again.")
    s.compaction("Greetings were exchanged twice.", s.ledger.entries[-1])
    s.commit()
    s.compaction("Greetings were exchanged.", first_answer)
    s.commit_corrupt()


@scenario("a compaction settling an attempt an assistant entry already settled")
def compaction_settles_settled_attempt(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.start_run("Again")
    answered = s.model_turn(op, 1, "Hello again.")
    s.compaction("Greetings.", s.ledger.entries[-1], attempt=answered)
    s.commit_corrupt()


@scenario("a compaction settling an attempt that already failed")
def compaction_settles_failed_attempt(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.operation_started("compaction")
    s.commit()
    summarizer = s.step_attempt(op, 1)
    s.commit()
    s.attempt_failed(summarizer, "timeout", "no answer in 60 s", retryable=True)
    s.commit()
    s.compaction("Greetings.", s.ledger.entries[-1], attempt=summarizer)
    s.commit_corrupt()


@scenario("three tool calls: three intents in one line, results out of order, one outcome error")
def parallel_tools(s: SessionBuilder) -> None:
    op = s.start_run("Check the three config files")
    calls = [call(f"call_p{n}", READ_FILE, path=f"conf/{n}.toml") for n in (1, 2, 3)]
    first = s.model_turn(op, 1, calls=calls, tokens=Tokens(300, 60, cost=0.0002))
    intents = [s.tool_started(first, c) for c in calls]
    s.commit()
    for intent, outcome in zip(intents[::-1], ("completed", "error", "completed"), strict=True):
        output = "Error: file not found" if outcome == "error" else "debug = false\n"
        s.tool_result(intent, output, outcome)
        s.commit()
    s.model_turn(op, 2, "conf/2.toml is missing.", tokens=Tokens(420, 12, cost=0.0002))
    s.finish(op)


@scenario("the run stops at the step limit: two tool steps, operationFinished stepLimit + detail")
def step_limit(s: SessionBuilder) -> None:
    op = s.start_run("Find every TODO")
    todo = call("call_g1", GREP, pattern="TODO", path=".")
    first = s.model_turn(op, 1, calls=[todo], tokens=Tokens(100, 20, cost=0.0001))
    s.run_tool(first, todo, "src/a.py:3: TODO\nsrc/b.py:9: TODO\n")
    more = call("call_g2", READ_FILE, path="src/a.py")
    second = s.model_turn(op, 2, calls=[more], tokens=Tokens(160, 22, cost=0.0001))
    s.run_tool(second, more, "# TODO: split\n")
    s.finish(op, "stepLimit", "stopped after 2 steps (--max-steps 2)")


@scenario("a valid prefix, then half of an [assistant, usage] line: ignored, tornTailBytes > 0")
def torn_tail(s: SessionBuilder) -> None:
    op = s.start_run("Say hi")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.assistant(attempt, "Hi!")
    s.usage(attempt, Tokens(10, 2, cost=0.000001))
    s.tear('"kind":"usage"', 9)


@scenario("the torn tail ends inside a 4-byte UTF-8 character (emoji cut after 2 bytes)")
def torn_tail_utf8(s: SessionBuilder) -> None:
    op = s.start_run("Say hi in Japanese")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.assistant(attempt, "こんにちは 🦀 です")
    s.tear("🦀", 2)


@scenario("the last fact is complete JSON but its LF never made it: still a torn tail")
def torn_tail_complete_json(s: SessionBuilder) -> None:
    s.exchange("Ping", "Pong", Tokens(5, 1, cost=0.0000005))
    s.run_started(s.user("Ping again"))
    s.tear()


# --- files that hold no session --------------------------------------------------------------


@scenario("0 bytes: no complete first line")
def empty_file(s: SessionBuilder) -> bytes:
    return b""


@scenario("a header without its LF: the first line never completed")
def torn_header(s: SessionBuilder) -> bytes:
    return s.lines[0].encode()[:90]


@scenario("line 1 is a JSON object of another format (no kind header)")
def not_a_session(s: SessionBuilder) -> bytes:
    foreign = {"type": "session", "version": 3, "id": s.session_id, "cwd": WORKSPACE}
    return (encode_line(foreign) + "\n" + encode_line({"type": "message"}) + "\n").encode()


@scenario("line 1 is not JSON at all (a Markdown file)")
def not_a_session_text(s: SessionBuilder) -> bytes:
    return b"# Meeting notes\n\n- ship it\n"


# --- corruption: the expected error names the first broken line -------------------------------


@scenario("header with version 3: corrupt at line 1")
def header_bad_version(s: SessionBuilder) -> None:
    s.damage_header(damaged("version", 3))
    s.exchange("Hi", "Hello.")


@scenario("header without environmentIdentity: corrupt at line 1")
def header_missing_field(s: SessionBuilder) -> None:
    s.damage_header(removed("environmentIdentity"))
    s.exchange("Hi", "Hello.")


@scenario("a torn tail never repaired, then appended to: the glued line is not JSON")
def bad_json_mid_file(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.", Tokens(5, 2))
    op = s.start_run("List the files")
    s.step_attempt(op, 1)
    torn = s.take_line()[:41]
    s.step_attempt(op, 1)
    s.write_corrupt_line(torn + s.take_line())
    s.exchange("Later prompt", "Later answer.")


@scenario("seq jumps by 2 between lines")
def seq_gap(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.start_run("Again")
    s.step_attempt(op, 1)
    s.commit_corrupt(damaged("seq", s.seq + 1))


@scenario("inside an [assistant, usage] array the second fact restarts at seq 1")
def seq_restart_in_array(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.assistant(attempt, "Hello.")
    s.usage(attempt, Tokens(5, 2))
    s.commit_corrupt(damaged("seq", 1, fact=1))


@scenario("a usage fact reuses the id of the first user entry")
def duplicate_id(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    first_entry = s.ledger.entries[0]
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.assistant(attempt, "Hello.")
    s.usage(attempt, Tokens(5, 2))
    s.commit_corrupt(damaged("id", first_entry, fact=1))


def _as_version_4(uuid_text: str) -> str:
    return uuid_text[:14] + "4" + uuid_text[15:]


@scenario("a toolStarted id with version nibble 4 instead of 7")
def non_v7_id(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.start_run("Read the README")
    readme = call("call_r1", READ_FILE, path="README.md")
    attempt = s.model_turn(op, 1, calls=[readme])
    intent = s.tool_started(attempt, readme)
    s.commit_corrupt(damaged("id", _as_version_4(intent.id)))


@scenario("a stepAttempt id written in uppercase hex")
def uppercase_id(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.exchange("Again", "Hello again.")
    op = s.start_run("Third")
    attempt = s.step_attempt(op, 1)
    s.commit_corrupt(damaged("id", attempt.id.upper()))


@scenario("usage.attemptId names an id that no fact has")
def dangling_reference(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    s.model_turn(op, 1, "Hello.")
    s.usage(Attempt(s.new_id(), op), Tokens(5, 2))
    s.commit_corrupt()


@scenario("toolStarted of the open run points at a tool call of another operation's attempt")
def wrong_ownership(s: SessionBuilder) -> None:
    op = s.start_run("Compare a and b")
    read_a = call("call_a", READ_FILE, path="a.txt")
    read_b = call("call_b", READ_FILE, path="b.txt")
    earlier = s.model_turn(op, 1, calls=[read_a, read_b])
    s.run_tool(earlier, read_a, "A\n")
    s.abort_requested(op, "KeyboardInterrupt")
    s.operation_finished(op, "aborted")
    s.commit()
    current = s.start_run("Now just read c")
    read_c = call("call_c", READ_FILE, path="c.txt")
    s.model_turn(current, 1, calls=[read_c])
    s.tool_started(replace(earlier, operation_id=current), read_b)
    s.commit_corrupt()


@scenario("a second tool result for an intent that already has one")
def second_result_for_intent(s: SessionBuilder) -> None:
    op = s.start_run("Read the README")
    readme = call("call_r1", READ_FILE, path="README.md")
    attempt = s.model_turn(op, 1, calls=[readme])
    intent = s.run_tool(attempt, readme, "# Demo\n")
    s.tool_result(replace(intent, result_id=s.new_id()), "# Demo again\n")
    s.commit_corrupt()


@scenario("a tool result whose id is not the resultEntryId its toolStarted reserved")
def result_id_not_reserved(s: SessionBuilder) -> None:
    op = s.start_run("Run ls")
    listing = call("call_l1", BASH, command="ls")
    attempt = s.model_turn(op, 1, calls=[listing])
    intent = s.tool_started(attempt, listing)
    s.commit()
    s.tool_result(intent, "README.md\n")
    s.commit_corrupt(damaged("id", s.new_id()))


@scenario("toolStarted reserves a resultEntryId that is already an entry's id")
def reserved_id_reused(s: SessionBuilder) -> None:
    op = s.start_run("Run ls")
    listing = call("call_l1", BASH, command="ls")
    attempt = s.model_turn(op, 1, calls=[listing])
    s.tool_started(attempt, listing)
    s.commit_corrupt(damaged("record.resultEntryId", s.ledger.entries[0]))


@scenario("a second usage fact for the same attempt")
def double_usage(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    attempt = s.model_turn(op, 1, "Hello.", tokens=Tokens(5, 2, cost=0.000001))
    s.usage(attempt, Tokens(5, 2, cost=0.000001))
    s.commit_corrupt()


@scenario("one usage fact with both attemptId and toolStartedId")
def usage_both_targets(s: SessionBuilder) -> None:
    op = s.start_run("Search issues")
    search = call("call_s1", ISSUE_SEARCH, repo="acme/demo", query="crash")
    attempt = s.model_turn(op, 1, calls=[search])
    intent = s.run_tool(attempt, search, "[]")
    s.usage(intent, Tokens(0, 0, cost=0.01))
    s.commit_corrupt(damaged("usage.attemptId", attempt.id))


@scenario("usage for an attempt whose operation already finished")
def usage_after_finish(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    attempt = s.model_turn(op, 1, "Hello.")
    s.finish(op)
    s.usage(attempt, Tokens(5, 2, cost=0.000001))
    s.commit_corrupt()


@scenario("inputTokens is true (a JSON boolean is not an integer)")
def bool_token_count(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.", Tokens(5, 2))
    op = s.start_run("Again")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.assistant(attempt, "Hello again.")
    s.usage(attempt, Tokens(5, 2))
    s.commit_corrupt(damaged("usage.inputTokens", True, fact=1))


@scenario("a negative outputTokens count")
def negative_token_count(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.assistant(attempt, "Hello.")
    s.usage(attempt, Tokens(5, 2))
    s.commit_corrupt(damaged("usage.outputTokens", -2, fact=1))


@scenario("a compaction whose tokensAfter is negative")
def compaction_negative_tokens_after(s: SessionBuilder) -> None:
    s.exchange("Name three primes", "2, 3, 5.", Tokens(20, 6, cost=0.00001))
    last_answer = s.ledger.entries[-1]
    op = s.operation_started("compaction")
    summarizer = s.step_attempt(op, 1)
    s.commit()
    s.compaction("Three primes were named.", last_answer, attempt=summarizer, tokens_before=30)
    s.commit_corrupt(damaged("entry.tokensAfter", -5))


@scenario("a run's options with a member the format does not name")
def run_options_unknown_member(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.run_started(s.user("Again"), ASK_BASH)
    s.commit_corrupt(damaged("record.options.temperature", 0.2, fact=1))


@scenario("a run's options with a negative budget")
def run_options_negative_budget(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.run_started(s.user("Again"), ASK_BASH)
    s.commit_corrupt(damaged("record.options.budget", -1, fact=1))


@scenario("a compaction operation with options: it has none (it counts with the run before it)")
def compaction_with_options(s: SessionBuilder) -> None:
    s.exchange("Name three primes", "2, 3, 5.", Tokens(20, 6, cost=0.00001))
    s.operation_started("compaction")
    s.commit_corrupt(damaged("record.options", ASK_BASH))


@scenario("cost written as the NaN literal, which is not JSON")
def nan_cost(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.", Tokens(5, 2, cost=0.000001))
    op = s.start_run("Again")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.assistant(attempt, "Hello again.")
    s.usage(attempt, Tokens(5, 2))
    s.commit_corrupt(damaged("usage.cost", float("nan"), fact=1))


@scenario('isError written as the string "false" instead of a boolean')
def wrong_json_type(s: SessionBuilder) -> None:
    op = s.start_run("Run ls")
    listing = call("call_l1", BASH, command="ls")
    attempt = s.model_turn(op, 1, calls=[listing])
    intent = s.tool_started(attempt, listing)
    s.commit()
    s.tool_result(intent, "README.md\n")
    s.commit_corrupt(damaged("entry.message.isError", "false"))


@scenario("a fact `at` with a fractional part (epoch ms must be an integer)")
def fractional_timestamp(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.start_run("Again")
    s.step_attempt(op, 1)
    s.commit_corrupt(damaged("at", CREATED_AT + MS_PER_SEQ * s.seq + 0.5))


@scenario("a fact `at` of 10**20 ms: past 9999-12-31, so no time any renderer can show")
def timestamp_out_of_range(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.start_run("Again")
    s.step_attempt(op, 1)
    s.commit_corrupt(damaged("at", 10**20))


@scenario("header createdAt of 10**20 ms: corrupt at line 1")
def header_created_at_out_of_range(s: SessionBuilder) -> None:
    s.damage_header(damaged("createdAt", 10**20))
    s.exchange("Hi", "Hello.")


@scenario("operationFinished while a toolStarted has no result")
def finish_with_pending_intent(s: SessionBuilder) -> None:
    op = s.start_run("Deploy")
    deploy = call("call_d1", BASH, command="./deploy.sh")
    attempt = s.model_turn(op, 1, calls=[deploy])
    s.tool_started(attempt, deploy)
    s.commit()
    s.operation_finished(op, "completed")
    s.commit_corrupt()


@scenario("operationFinished while a stepAttempt is still pending")
def finish_with_pending_attempt(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.start_run("Again")
    s.step_attempt(op, 1)
    s.commit()
    s.operation_finished(op, "interrupted")
    s.commit_corrupt()


@scenario("[user, runStarted] while another operation is still open")
def two_open_operations(s: SessionBuilder) -> None:
    op = s.start_run("First")
    s.model_turn(op, 1, "Working on it.")
    s.run_started(s.user("Second"))
    s.commit_corrupt()


@scenario("a stepAttempt for an operation that already finished")
def reference_finished_operation(s: SessionBuilder) -> None:
    op = s.exchange("Hi", "Hello.")
    s.exchange("Again", "Hello again.")
    s.step_attempt(op, 2)
    s.commit_corrupt()


@scenario("a second run reuses the operationId of a finished run")
def operation_id_reused(s: SessionBuilder) -> None:
    op = s.exchange("Hi", "Hello.")
    s.run_started(s.user("Again"))
    s.commit_corrupt(damaged("record.operationId", op, fact=1))


@scenario("a second run names the first run's user entry as its input")
def input_entry_reused(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    first_input = s.ledger.entries[0]
    s.run_started(first_input)
    s.commit_corrupt()


@scenario("a run whose inputEntryId is an assistant entry")
def run_input_not_user(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    answer = s.ledger.entries[-1]
    s.run_started(answer)
    s.commit_corrupt()


@scenario("[runStarted, user entry]: the run references an entry later in the same array")
def forward_reference_in_array(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    later = s.new_id()
    s.run_started(later)
    s.fact("entry", {"type": "message", "message": {"role": "user", "content": "Again"}}, later)
    s.commit_corrupt()


@scenario("a resume of an operation whose outcome is completed")
def resume_of_completed_operation(s: SessionBuilder) -> None:
    op = s.exchange("Hi", "Hello.")
    s.operation_started("resume", resumesOperationId=op)
    s.commit_corrupt()


@scenario("a resume that carries a non-null inputEntryId")
def resume_with_input(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.attempt_failed(attempt, "interrupted", "kernel restarted", retryable=False)
    s.operation_finished(op, "interrupted")
    s.commit()
    s.operation_started("resume", resumesOperationId=op)
    s.commit_corrupt(damaged("record.inputEntryId", s.ledger.entries[0]))


@scenario("an assistant entry answering an attempt that already failed")
def assistant_for_failed_attempt(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.attempt_failed(attempt, "timeout", "no response within 60 s", retryable=True)
    s.commit()
    s.assistant(attempt, "Hello (late).")
    s.commit_corrupt()


@scenario("a new stepAttempt while a tool call of the settled assistant entry has no result")
def step_attempt_with_unanswered_tool_call(s: SessionBuilder) -> None:
    op = s.start_run("Read two files")
    read_a = call("call_a", READ_FILE, path="a.txt")
    read_b = call("call_b", READ_FILE, path="b.txt")
    attempt = s.model_turn(op, 1, calls=[read_a, read_b])
    s.run_tool(attempt, read_a, "A\n")
    s.step_attempt(op, 2)
    s.commit_corrupt()


@scenario("an assistant entry with two tool calls sharing one id")
def duplicate_tool_call_id(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.start_run("Read two files")
    attempt = s.step_attempt(op, 1)
    s.commit()
    twins = [call("call_x", READ_FILE, path="a.txt"), call("call_x", READ_FILE, path="b.txt")]
    s.assistant(attempt, calls=twins)
    s.commit_corrupt()


@scenario("toolStarted tool.name differs from the name of the tool call it answers")
def tool_name_mismatch(s: SessionBuilder) -> None:
    op = s.start_run("Read the README")
    readme = call("call_r1", READ_FILE, path="README.md")
    attempt = s.model_turn(op, 1, calls=[readme])
    s.tool_started(attempt, replace(readme, tool=GREP))
    s.commit_corrupt()


@scenario("toolStarted with tool.source plugin (only builtin or mcp:<server>)")
def bad_tool_source(s: SessionBuilder) -> None:
    op = s.start_run("Run ls")
    listing = call("call_l1", BASH, command="ls")
    attempt = s.model_turn(op, 1, calls=[listing])
    s.tool_started(attempt, replace(listing, tool=replace(BASH, source="plugin")))
    s.commit_corrupt()


@scenario("replayKey computed before defaults were added to the stored arguments")
def replay_key_mismatch(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.start_run("Read the README")
    readme = call("call_r1", READ_FILE, path="README.md")
    attempt = s.model_turn(op, 1, calls=[readme])
    s.tool_started(attempt, readme)
    s.commit_corrupt(damaged("record.arguments.limit", 2000))


MAX_JSON_DEPTH = 64  # how deeply tool arguments may nest (the arguments object is level 1)


def nested_arguments(depth: int) -> dict[str, Any]:
    """Arguments `{"path": ..., "filter": {...}}` whose objects nest exactly `depth` deep."""
    value: Any = "x"
    for _ in range(depth - 1):
        value = {"v": value}
    return {"path": "config.json", "filter": value}


@scenario("tool arguments nested 64 levels deep, the deepest a session may hold: they load")
def arguments_at_depth_limit(s: SessionBuilder) -> None:
    op = s.start_run("Read the config")
    deep = ToolCall("call_d1", READ_FILE, nested_arguments(MAX_JSON_DEPTH))
    attempt = s.model_turn(op, 1, calls=[deep])
    intent = s.tool_started(attempt, deep)
    s.commit()
    s.tool_result(intent, "{}")
    s.commit()


@scenario("tool call arguments nested 65 levels deep, one more than a session may hold")
def arguments_too_deep(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.start_run("Read the config")
    attempt = s.step_attempt(op, 1)
    s.commit()
    s.assistant(attempt, calls=[ToolCall("call_d1", READ_FILE, nested_arguments(65))])
    s.commit_corrupt()


@scenario("a tool result whose message.toolCallId is not the intent's toolCallId")
def tool_result_wrong_call_id(s: SessionBuilder) -> None:
    op = s.start_run("Run ls")
    listing = call("call_l1", BASH, command="ls")
    attempt = s.model_turn(op, 1, calls=[listing])
    intent = s.tool_started(attempt, listing)
    s.commit()
    s.tool_result(intent, "README.md\n")
    s.commit_corrupt(damaged("entry.message.toolCallId", "call_l2"))


@scenario("a compaction whose throughEntryId names no entry")
def compaction_through_unknown(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.exchange("Again", "Hello again.")
    s.compaction("Greetings were exchanged.", s.new_id())
    s.commit_corrupt()


@scenario("a fact of kind note")
def unknown_kind(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    s.model_turn(op, 1, "Hello.")
    s.fact("note", {"text": "remember this"})
    s.commit_corrupt()


@scenario("a stepAttempt with an extra field temperature")
def unknown_field(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    op = s.start_run("Again")
    s.step_attempt(op, 1)
    s.commit_corrupt(damaged("record.temperature", 0.2))


@scenario("a record of type checkpoint")
def unknown_record_type(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    s.model_turn(op, 1, "Hello.")
    s.fact("record", {"type": "checkpoint", "operationId": op})
    s.commit_corrupt()


@scenario("a transaction line that is an empty array")
def empty_array(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.write_corrupt_line("[]")


@scenario("an empty line between two transactions")
def blank_line(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    s.write_corrupt_line("")
    s.model_turn(op, 1, "Hello.")


@scenario("a second header line after valid transactions")
def second_header(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    s.write_corrupt_line(s.lines[0])


@scenario("the last line is LF-terminated but cut short: corruption, not a torn tail")
def corrupt_last_line(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    s.model_turn(op, 1, "Hello.")
    s.operation_finished(op)
    s.write_corrupt_line(s.take_line()[:-20])


# --- the user's cells (docs/spec.md §6) ------------------------------------------------------

USER_CELLS = (
    "[Cells the user ran since the previous agent cell, oldest first]\n"
    "In [2]:\n```python\nrecords = json.loads(text)\n```\n"
    "\u2192 json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0) "
    "(at In [2], line 1: records = json.loads(text))\n"
    "[End of the user's cells]"
)


def _run_with_cells(s: SessionBuilder, prompt: str, cells: object) -> str:
    operation_id = s.run_started(s.user(prompt, userCells=cells))
    s.commit()
    return operation_id


@scenario("a prompt sent with the user's cells (userCells), then one without")
def user_cells(s: SessionBuilder) -> None:
    op = _run_with_cells(s, "Why did it fail?", USER_CELLS)
    s.model_turn(op, 1, "The text is not JSON.")
    s.finish(op)
    s.exchange("Thanks.", "You are welcome.")


@scenario("userCells null: the same as absent")
def user_cells_null(s: SessionBuilder) -> None:
    op = _run_with_cells(s, "Hi", None)
    s.model_turn(op, 1, "Hello.")
    s.finish(op)


@scenario("userCells is a number, not text")
def user_cells_not_text(s: SessionBuilder) -> None:
    s.exchange("Hi", "Hello.")
    entry = s.user("Again")
    s.run_started(entry)
    s.commit_corrupt(damaged("entry.userCells", 5))


# --- the system prompt (docs/spec.md §7) ------------------------------------------------------

NOTEBOOK_PROMPT = (
    "You are an agent working in a Jupyter notebook, for the person using it. "
    "Today is 2024-05-01.\nKeep answers short and concrete."
)


def _told(s: SessionBuilder, operation_id: str, prompt: str | None, answer: str) -> None:
    """A model turn whose stepAttempt is committed with a systemPrompt record when
    `prompt` is given (the system message changed), alone otherwise."""
    if prompt is not None:
        s.record("systemPrompt", operation_id, prompt)
    attempt = s.step_attempt(operation_id, 1)
    s.commit()
    s.assistant(attempt, answer)
    s.commit()


@scenario("the system prompt recorded with the first request, again only when it changed")
def system_prompt(s: SessionBuilder) -> None:
    for prompt, question in (
        (NOTEBOOK_PROMPT, "Hi"),
        (None, "Again"),
        (NOTEBOOK_PROMPT.replace("2024-05-01", "2024-05-02"), "Next day"),
        ("", "No system message"),
    ):
        op = s.start_run(question)
        _told(s, op, prompt, "Hello.")
        s.finish(op)


@scenario("a systemPrompt record naming a run that already finished")
def system_prompt_after_finish(s: SessionBuilder) -> None:
    op = s.exchange("Hi", "Hello.")
    s.record("systemPrompt", op, NOTEBOOK_PROMPT)
    s.commit_corrupt()


@scenario("a systemPrompt record whose content is not text")
def system_prompt_not_text(s: SessionBuilder) -> None:
    op = s.start_run("Hi")
    s.record("systemPrompt", op, None)
    s.step_attempt(op, 1)
    s.commit_corrupt()


# --- kernels (docs/spec.md §9) ---------------------------------------------------------------


def _first_kernel_run(s: SessionBuilder) -> None:
    """Kernel 1 opens the new session and runs a python call that defines `primes`."""
    s.kernel_opened(4100)
    s.commit()
    op = s.start_run("Define primes")
    define = call("call_p1", PYTHON, code="primes = [2, 3, 5]")
    turn = s.model_turn(op, 1, calls=[define])
    s.run_tool(turn, define, "")
    s.model_turn(op, 2, "Defined primes.")
    s.finish(op)


@scenario("kernel 1 runs python; kernel 2 opens; its run starts [kernelNotice, user, runStarted]")
def kernel_restart(s: SessionBuilder) -> None:
    _first_kernel_run(s)
    second = s.kernel_opened(4242, started_at=CREATED_AT + 5_000)
    s.commit()
    s.kernel_notice(second)
    op = s.run_started(s.user("Print primes"))
    s.commit()
    s.model_turn(op, 1, "primes is gone with the old kernel.")
    s.finish(op)


@scenario("kernel dies in bash; kernel 2's kernelOpened before the recovery; resume + notice")
def kernel_restart_after_a_crash(s: SessionBuilder) -> None:
    s.kernel_opened(4100)
    s.commit()
    op = s.start_run("Deploy")
    deploy = call("call_d1", BASH, command="./deploy.sh")
    turn = s.model_turn(op, 1, calls=[deploy])
    intent = s.tool_started(turn, deploy)
    s.commit()
    second = s.kernel_opened(4242, started_at=CREATED_AT + 5_000)  # the dead kernel's run open
    s.commit()
    s.interrupted_result(intent)
    s.operation_finished(op, "interrupted")
    s.commit()
    resume = s.operation_started("resume", resumesOperationId=op)
    s.kernel_notice(second)
    s.commit()
    s.model_turn(resume, 1, "The deploy may have run; check before running it again.")
    s.finish(resume)


@scenario("two kernels open with no run between: one notice, naming the latest")
def kernel_restarted_twice(s: SessionBuilder) -> None:
    _first_kernel_run(s)
    s.kernel_opened(4242, started_at=CREATED_AT + 5_000)
    s.commit()
    third = s.kernel_opened(4343, started_at=CREATED_AT + 9_000)
    s.commit()
    s.kernel_notice(third)
    op = s.run_started(s.user("Print primes"))
    s.commit()
    s.model_turn(op, 1, "primes is gone with the old kernel.")
    s.finish(op)


@scenario("a kernelNotice naming a kernelOpened that is not the latest")
def kernel_notice_names_an_earlier_kernel(s: SessionBuilder) -> None:
    _first_kernel_run(s)
    second = s.kernel_opened(4242, started_at=CREATED_AT + 5_000)
    s.commit()
    s.kernel_opened(4343, started_at=CREATED_AT + 9_000)
    s.commit()
    s.kernel_notice(second)
    s.commit_corrupt()


@scenario("a second kernelNotice for the same kernelOpened")
def kernel_notice_twice(s: SessionBuilder) -> None:
    _first_kernel_run(s)
    second = s.kernel_opened(4242, started_at=CREATED_AT + 5_000)
    s.commit()
    s.kernel_notice(second)
    s.commit()
    s.kernel_notice(second)
    s.commit_corrupt()


@scenario("a kernelNotice whose kernelOpenedId names a run's user entry")
def kernel_notice_names_no_kernel(s: SessionBuilder) -> None:
    s.kernel_opened(4100)
    s.commit()
    s.start_run("Hi")
    s.kernel_notice(s.ledger.entries[-1])
    s.commit_corrupt()


@scenario("a kernelNotice between a tool call and its result")
def kernel_notice_between_a_call_and_its_result(s: SessionBuilder) -> None:
    s.kernel_opened(4100)
    s.commit()
    op = s.start_run("List")
    listing = call("call_l1", BASH, command="ls")
    turn = s.model_turn(op, 1, calls=[listing])
    s.tool_started(turn, listing)
    s.commit()
    second = s.kernel_opened(4242, started_at=CREATED_AT + 5_000)
    s.commit()
    s.kernel_notice(second)
    s.commit_corrupt()


@scenario("a run whose inputEntryId names a kernelNotice, not a user entry")
def kernel_notice_as_a_run_input(s: SessionBuilder) -> None:
    _first_kernel_run(s)
    second = s.kernel_opened(4242, started_at=CREATED_AT + 5_000)
    s.commit()
    s.run_started(s.kernel_notice(second))
    s.commit_corrupt()


@scenario("a kernelOpened without its host")
def kernel_opened_without_a_host(s: SessionBuilder) -> None:
    s.kernel_opened(4100)
    s.commit_corrupt(removed("record.host"))


@scenario("a kernelOpened whose pid is -1")
def kernel_opened_negative_pid(s: SessionBuilder) -> None:
    s.kernel_opened(4100)
    s.commit_corrupt(damaged("record.pid", -1))


# --- output -----------------------------------------------------------------------------------


def outcome_text(expected: dict[str, Any]) -> str:
    if "summary" in expected:
        summary = expected["summary"]
        statuses = ", ".join(op["status"] for op in summary["operations"]) or "none"
        torn = f", torn {summary['tornTailBytes']} B" if summary["tornTailBytes"] else ""
        return f"summary: lastSeq {summary['lastSeq']}, operations: {statuses}{torn}"
    error = expected["error"]
    return f"{error['type']} line {error['line']}" if "line" in error else error["type"]


def readme_text(fixtures: Sequence[Fixture]) -> str:
    rows = [f"| `{f.name}` | {f.about} | {outcome_text(f.expected)} |" for f in fixtures]
    return "\n".join(
        [
            "# Session conformance fixtures",
            "",
            "Generated by `python scripts/make_session_fixtures.py`; do not edit by hand.",
            "Change the script and rerun it (`--check` fails when these files are stale).",
            "",
            "`NAME.jsonl` is a session file. `NAME.expected.json` is what loading it gives:",
            '`{"summary": ...}` (the `SessionState.summary()` shape of',
            "[docs/session-format.md](../../../docs/session-format.md) §7),",
            '`{"error": {"type": "SessionCorruptError", "line": N}}` (lines count from 1,',
            'the header is line 1) or `{"error": {"type": "NotASessionError"}}`.',
            "",
            "| fixture | exercises | expected |",
            "|---|---|---|",
            *rows,
            "",
        ]
    )


# --- replayed runs (docs/spec.md §12) --------------------------------------------------------

CELL = "9f1c2b7e-5d4a-4e3b-8a6f-1c2d3e4f5a6b"
OPTIONS = payload("options", "auto", ["read_file", "bash", "python"], None, 20, MODEL)


def _cell_run(s: SessionBuilder) -> tuple[str, Attempt, ToolCall]:
    """A notebook cell's completed run that called python, then bash."""
    op = s.operation_started(
        "run", inputEntryId=s.user("Define primes"), options=OPTIONS, cellId=CELL
    )
    s.commit()
    define = call("call_p1", PYTHON, code="primes = [2, 3, 5]")
    log = call("call_b1", BASH, command="echo primes >> log.txt")
    first = s.model_turn(op, 1, calls=[define, log], tokens=Tokens(90, 20, cost=0.0001))
    s.run_tool(first, define, "")
    s.run_tool(first, log, "")
    s.model_turn(op, 2, "Defined primes.", tokens=Tokens(140, 5, cost=0.0001))
    s.finish(op)
    return op, first, define


@scenario("a replayed run: the cell's python call run again under the replay, bash not")
def replayed_run(s: SessionBuilder) -> None:
    op, first, define = _cell_run(s)
    replay = s.operation_started("replay", replaysOperationId=op, cellId=CELL)
    s.commit()
    rerun = s.tool_started(first, define, replay)
    s.commit()
    s.tool_result(rerun, "")
    s.commit()
    s.finish(replay)


@scenario("killed while a replayed run's python call ran: the replay is open, its intent pending")
def killed_during_replay(s: SessionBuilder) -> None:
    op, first, define = _cell_run(s)
    replay = s.operation_started("replay", replaysOperationId=op, cellId=CELL)
    s.commit()
    s.tool_started(first, define, replay)
    s.commit()


@scenario("a stepAttempt in a replayed run, which sends no model request")
def replay_with_step_attempt(s: SessionBuilder) -> None:
    op, _, _ = _cell_run(s)
    replay = s.operation_started("replay", replaysOperationId=op, cellId=CELL)
    s.commit()
    s.step_attempt(replay, 1)
    s.commit_corrupt()


@scenario("a replayed run naming a resume as the run it replays")
def replay_of_a_resume(s: SessionBuilder) -> None:
    op = s.start_run("Count")
    s.finish(op, "interrupted")
    resume = s.operation_started("resume", resumesOperationId=op)
    s.commit()
    s.finish(resume)
    s.operation_started("replay", replaysOperationId=resume)
    s.commit_corrupt()


# --- rewinds (docs/spec.md §17) ----------------------------------------------------------

NOTES_BEFORE = sha256_tag("draft\n")
NOTES_AFTER = sha256_tag("draft\nmore\n")


@scenario("a rewind to before the second run: one fileRestore, then the conversation goes on")
def rewind_with_file_restore(s: SessionBuilder) -> None:
    s.exchange("Start", "Started.")
    op = s.start_run("Append to notes")
    append = call("call_w1", WRITE_FILE, path="notes.md")
    first = s.model_turn(op, 1, calls=[append])
    s.run_tool(first, append, "wrote notes.md")
    s.model_turn(op, 2, "Appended.")
    s.finish(op)
    rewind = s.operation_started("rewind", rewindsOperationId=op)
    s.commit()
    s.record("fileRestore", rewind, "notes.md", NOTES_AFTER, 0o644, NOTES_BEFORE, 0o644)
    s.commit()
    s.finish(rewind)
    s.exchange("Try again", "Tried.")


@scenario("a fileRestore naming a run, not a rewind")
def file_restore_outside_rewind(s: SessionBuilder) -> None:
    op = s.start_run("Append to notes")
    s.record("fileRestore", op, "notes.md", NOTES_AFTER, 0o644, None, None)
    s.commit_corrupt()


def render() -> dict[str, bytes]:
    fixtures = [make_fixture(*registered) for registered in _SCENARIOS]
    names = [f.name for f in fixtures]
    assert len(set(names)) == len(names), "duplicate fixture name"
    files: dict[str, bytes] = {}
    for f in fixtures:
        files[f"{f.name}.jsonl"] = f.data
        expected = json.dumps(f.expected, indent=1, ensure_ascii=False) + "\n"
        files[f"{f.name}.expected.json"] = expected.encode()
    files["README.md"] = readme_text(fixtures).encode()
    return files


def _generated(directory: Path) -> set[str]:
    patterns = ("*.jsonl", "*.expected.json", "README.md")
    return {p.name for pattern in patterns for p in directory.glob(pattern)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale files, write none")
    parser.add_argument("--out", type=Path, default=FIXTURES_DIR, help="fixture directory")
    args = parser.parse_args(argv)
    out: Path = args.out
    files = render()
    existing = _generated(out) if out.is_dir() else set()
    stale = sorted(existing - files.keys())
    changed = sorted(n for n, data in files.items() if not _same(out / n, data))
    if args.check:
        for name in changed + stale:
            print(f"stale: {out / name}", file=sys.stderr)
        return 1 if changed or stale else 0
    out.mkdir(parents=True, exist_ok=True)
    for name in changed:
        (out / name).write_bytes(files[name])
    for name in stale:
        (out / name).unlink()
    print(f"{len(files)} files in {out}: {len(changed)} written, {len(stale)} removed")
    return 0


def _same(path: Path, data: bytes) -> bool:
    return path.is_file() and path.read_bytes() == data


if __name__ == "__main__":
    sys.exit(main())
