"""SessionState: what a session file says, reduced into lookup tables (`_tables`), and
the validated entries themselves (docs/session-format.md §8.1)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ._facts import NewFact
from ._files import ReadBytes
from ._framing import encode_transaction, parse_transaction
from ._models import EntryFact, Fact, Header, Usage
from ._records import MAX_WINDOW, MIN_WINDOW
from ._reducer import build_transaction
from ._tables import (
    Attempt,
    EntryType,
    Kernel,
    LearnedWindow,
    Operation,
    Restore,
    Spend,
    Tables,
    ToolIntent,
    entry_type,
)
from ._usage import UsageTotals, usage_in_range


class SessionState:
    """The reduction of a session file, read-only: its mappings are read-only proxies and
    its totals a copy. Only the session's reader and store change its tables."""

    def __init__(
        self,
        header: Header,
        read: ReadBytes,
        tables: Tables | None = None,
        *,
        torn_tail_bytes: int = 0,
    ) -> None:
        self._header = header
        self._read = read
        self._tables = tables if tables is not None else Tables()
        self._torn_tail_bytes = torn_tail_bytes

    def with_torn_tail(self, torn_tail_bytes: int) -> SessionState:
        """This state saying another torn tail (0 once the writer cut it)."""
        return SessionState(self._header, self._read, self._tables, torn_tail_bytes=torn_tail_bytes)

    def append_transaction(
        self, facts: Sequence[NewFact], at: int, write: Callable[[list[Fact], bytes], None]
    ) -> list[Fact]:
        """The store's commit, on its own state (never one handed out): `facts` built and
        applied, their line given to `write`, then kept. Whatever raises (a refused fact,
        a failed write, a signal handler's exception) leaves the tables as they were."""
        tables = self._tables
        savepoint = tables.begin()
        try:
            built = build_transaction(tables, facts, at)
            line = encode_transaction(built)
            write(built, line)
        except BaseException:
            tables.rollback(savepoint)
            raise
        tables.commit()
        tables.transactions += 1
        self._read.add(line)
        return built

    @property
    def path(self) -> str:
        """The file this state was read from (as it was named when opened)."""
        return self._read.path

    @property
    def header(self) -> Header:
        return self._header

    @property
    def torn_tail_bytes(self) -> int:
        """Bytes after the last complete line when the file was read (a write cut short)."""
        return self._torn_tail_bytes

    # -- views -------------------------------------------------------------
    @property
    def transaction_count(self) -> int:
        """Lines after the header: one per committed transaction."""
        return self._tables.transactions

    @property
    def last_seq(self) -> int:
        return self._tables.last_seq

    @property
    def open_operation(self) -> Operation | None:
        op_id = self._tables.open_operation_id
        return None if op_id is None else self._tables.operations[op_id]

    def spend(self, operation_id: str) -> Spend:
        """What the chain of `operation_id` spent (docs/spec.md §4): the operation, the
        runs it resumes back to the one that accepted the prompt, and the compactions
        after any of them. Unknown cost is counted apart, never as zero."""
        t = self._tables
        cost, unknown, operations = 0.0, 0, 0
        seen: set[str] = set()
        current: str | None = operation_id
        while current is not None and current not in seen:
            seen.add(current)
            spent = t.spends.get(current)
            if spent is not None:
                cost, unknown = cost + spent.cost, unknown + spent.unknown
                operations += spent.operations
            op = t.operations.get(current)
            current = op.resumes_operation_id if op is not None else None
        return Spend(round(cost, 12), unknown, operations)

    def last_input_tokens(self) -> int | None:
        """The server's input token count of the newest settled attempt (docs/spec.md §4),
        unless a compaction settled it or a rewind came after it (the context it measured
        is gone) or it reported no usage. The newest attempts are read: one or two."""
        t = self._tables
        for attempt in reversed(t.attempts.values()):
            if attempt.status != "settled":
                continue
            entry = t.entries.get(attempt.entry_id or "")
            usage = t.usage.get(attempt.id)
            if entry is None or entry_type(entry) != "assistant":
                return None
            if usage is None or not usage_in_range(usage) or entry.seq < t.rewound_at:
                return None
            return usage.inputTokens
        return None

    @property
    def system_prompt(self) -> str | None:
        """The content of the latest systemPrompt record (docs/spec.md §7): what the model
        requests since it sent as their system message; None when none is recorded."""
        return self._tables.system_prompt

    def transaction_bytes(self, count: int | None = None) -> Iterator[bytes]:
        """The first `count` transaction lines' bytes (None: all) as the file holds them,
        every LF included, read again and checked (docs/session-format.md §8.1): what a
        fork copies."""
        return (line + b"\n" for line in self._read.lines()[:count])

    @property
    def facts(self) -> list[Fact]:
        """Every committed fact, decoded from the transaction lines read again: O(history),
        for tools and tests; the views above are what a running notebook reads."""
        facts: list[Fact] = []
        for line in self._read.lines():
            facts.extend(parse_transaction(line))
        return facts

    @property
    def entries(self) -> EntryView:
        """The entries in commit order."""
        return EntryView(self._tables.entries)

    def entry_path(self) -> list[str]:
        """The ids of the entries on the conversation's path, from its start to its head, in
        file order (docs/spec.md §17): what the model is sent. Without a rewind, all."""
        return self._tables.entry_path()

    def operation_path(self) -> list[Operation]:
        """The operations on the conversation's path in file order (docs/spec.md §17):
        not those a rewind left behind, nor the rewinds."""
        return self._tables.operation_path()

    @property
    def file_restores(self) -> Mapping[str, Restore]:
        """The `fileRestore` records by fact id, in file order (docs/spec.md §17)."""
        return MappingProxyType(self._tables.restores)

    @property
    def operations(self) -> Mapping[str, Operation]:
        return MappingProxyType(self._tables.operations)

    @property
    def attempts(self) -> Mapping[str, Attempt]:
        return MappingProxyType(self._tables.attempts)

    def attempts_newest_first(self) -> Iterator[Attempt]:
        """The attempts in reverse commit order, without copying the table."""
        return reversed(self._tables.attempts.values())

    @property
    def tool_intents(self) -> Mapping[str, ToolIntent]:
        return MappingProxyType(self._tables.intents)

    @property
    def usage(self) -> Mapping[str, Usage]:
        """The usage of each stepAttempt or toolStarted that reported one, by its id. A
        usage fact with a count or cost past MAX_REPORTED is not here: it reads as no
        usage (docs/spec.md §4), on every surface and in every sum."""
        return UsageView(self._tables.usage)

    @property
    def context_windows(self) -> Mapping[tuple[str, str], LearnedWindow]:
        """The window learned for each (base URL, model), from its newest record, when
        that record states one the session believes (docs/spec.md §8): not one the user
        forgot, nor one taken from a server's count (`truncation`: a server that counts
        only what its cache did not hold gives the same counts), nor one whose tokens are
        outside MIN_WINDOW..MAX_WINDOW (a crafted file: a run would otherwise overflow a
        float on it, or never get under it)."""
        return MappingProxyType(
            {
                pair: window
                for pair, window in self._tables.windows.items()
                if window.source in ("listing", "refusal")
                and window.tokens is not None
                and MIN_WINDOW <= window.tokens <= MAX_WINDOW
            }
        )

    @property
    def kernels(self) -> Mapping[str, Kernel]:
        """The kernels that opened the session for writing, in file order (docs/session-format.md
        §2.3, docs/spec.md §9)."""
        return MappingProxyType(self._tables.kernels)

    def run_kernels(self) -> list[Kernel | None]:
        """The kernel that started each run, in run order: the latest `kernelOpened`
        before its `runStarted` (None: none, a writer that recorded no kernel)."""
        kernels = iter(self._tables.kernels.values())
        writer, upcoming = None, next(kernels, None)
        writers: list[Kernel | None] = []
        for run in range(len(self._tables.operations)):
            while upcoming is not None and upcoming.operations_before <= run:
                writer, upcoming = upcoming, next(kernels, None)
            writers.append(writer)
        return writers

    @property
    def totals(self) -> UsageTotals:
        return self._tables.totals.copy()

    def usage_by_operation(self) -> dict[str, UsageTotals]:
        """The usage ledger summed per operation (attempts' and tool intents' usage), in
        file order; together the sums are exactly `totals`."""
        t = self._tables
        by_operation = {op_id: UsageTotals() for op_id in t.operations}
        for target, usage in t.usage.items():
            attempt = t.attempts.get(target)
            owner = attempt.operation_id if attempt else t.intents[target].operation_id
            by_operation[owner].add(usage)
        return by_operation

    def copy(self) -> SessionState:
        return SessionState(
            self._header,
            self._read.copy(),
            self._tables.copy(),
            torn_tail_bytes=self._torn_tail_bytes,
        )

    def summary(self) -> dict[str, Any]:
        """The canonical, language-neutral summary the conformance fixtures compare."""
        t = self._tables
        summary: dict[str, Any] = {
            "sessionId": self.header.id,
            "version": self.header.version,
            "lastSeq": t.last_seq,
            "transactionCount": self.transaction_count,
            "tornTailBytes": self.torn_tail_bytes,
            "entries": list(t.entries),
            "operations": [
                # options only when recorded: summaries of files before them stay as they were
                {"id": op.id, "kind": op.kind, "status": op.status}
                | ({"options": op.options.model_dump()} if op.options is not None else {})
                | ({"cellId": op.cell_id} if op.cell_id is not None else {})
                | (
                    {"replaysOperationId": op.replays_operation_id}
                    if op.replays_operation_id is not None
                    else {}
                )
                | (
                    {"rewindsOperationId": op.rewinds_operation_id}
                    if op.rewinds_operation_id is not None
                    else {}
                )
                for op in t.operations.values()
            ],
            "attempts": [
                {"id": a.id, "operationId": a.operation_id, "status": a.status}
                for a in t.attempts.values()
            ],
            "toolIntents": [
                {
                    "id": i.id,
                    "tool": i.tool.name,
                    "replayPolicy": i.replay_policy,
                    "status": i.status,
                }
                for i in t.intents.values()
            ],
            "usage": t.totals.summary(),
        }
        if t.windows:  # only then: summaries of files without one stay as they were
            summary["contextWindows"] = [
                {"baseUrl": url, "model": model, "tokens": w.tokens, "source": w.source}
                for (url, model), w in t.windows.items()
            ]
        return summary

    def __repr__(self) -> str:
        return (
            f"<SessionState {self.path!r} lastSeq={self.last_seq} "
            f"transactions={self.transaction_count} operations={len(self.operations)}>"
        )


class EntryView(Mapping[str, EntryFact]):
    """`SessionState.entries`: the validated entries, read-only, in commit order."""

    __slots__ = ("_entries",)

    def __init__(self, entries: dict[str, EntryFact]) -> None:
        self._entries = entries

    def __getitem__(self, entry_id: str) -> EntryFact:
        return self._entries[entry_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._entries

    def type_of(self, entry_id: str) -> EntryType | None:
        """The entry's type (None: no such entry)."""
        entry = self._entries.get(entry_id)
        return None if entry is None else entry_type(entry)

    def last(self) -> EntryFact | None:
        """The most recent entry."""
        return next(reversed(self._entries.values()), None)


class UsageView(Mapping[str, Usage]):
    """`SessionState.usage`: the usage table, read-only, without the usage facts out of
    range (`usage_in_range`): those read as no usage."""

    __slots__ = ("_usage",)

    def __init__(self, usage: dict[str, Usage]) -> None:
        self._usage = usage

    def __getitem__(self, target: str) -> Usage:
        usage = self._usage[target]
        if not usage_in_range(usage):
            raise KeyError(target)
        return usage

    def __iter__(self) -> Iterator[str]:
        return (target for target, usage in self._usage.items() if usage_in_range(usage))

    def __len__(self) -> int:
        return sum(1 for usage in self._usage.values() if usage_in_range(usage))

    def __contains__(self, target: object) -> bool:
        return self.get(target) is not None

    def get(self, target: object, default: Any = None) -> Any:
        """Direct, not Mapping's `get` through `__getitem__` and a KeyError: the loop
        reads the usage of every attempt per step (`agent._window.largest_count`)."""
        usage = self._usage.get(target) if isinstance(target, str) else None
        return usage if usage is not None and usage_in_range(usage) else default
