"""SessionState: what a session file says, reduced into lookup tables (`_tables`).

History itself stays as the transaction lines' bytes. Entries are found through an
`EntrySlot` (line, position, type) and decoded when read: a kept pydantic fact is ~10
objects the cyclic GC rescans for the life of the kernel and a second copy of its text;
bytes and tuples of atoms are neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ._commit import build_transaction
from ._facts import NewFact
from ._framing import encode_transaction, parse_transaction
from ._model_base import MAX_WINDOW, MIN_WINDOW
from ._models import Fact, Header, RecordFact, Usage
from ._records import SystemPrompt
from ._tables import (
    Attempt,
    Kernel,
    LearnedWindow,
    Operation,
    Tables,
    ToolIntent,
    UsageTotals,
    usage_of,
)
from ._views import EntryView, UsageView, facts_of


class SessionState:
    """The reduction of a session file, read-only: every view is a property, its mappings
    are read-only proxies and its totals a copy. Its tables change only through its own
    methods, which only the session's reader and store call (`append_transaction`: the
    reducer applies each committed transaction to them)."""

    def __init__(
        self,
        path: str,
        header: Header,
        tables: Tables | None = None,
        *,
        header_line: bytes = b"",
        torn_tail_bytes: int = 0,
    ) -> None:
        """Made once, by the session's reader or store: `tables` reduced from the file's
        lines, the header line as read, and the bytes after the last complete line when
        it was read."""
        self._path = path
        self._header = header
        self._tables = tables if tables is not None else Tables()
        self._header_line = header_line
        self._torn_tail_bytes = torn_tail_bytes

    def close(self) -> None:
        """Let go of the descriptor this state reads its lines back from (docs/session-format.md
        §8.1); it closes once no other state holds it. The state's lines cannot be read
        after this (ValueError); its tables can. `with load_session(path) as state:`
        closes it at the block's end; a state never closed lets go when it is freed."""
        self._tables.lines.close()

    def with_torn_tail(self, torn_tail_bytes: int) -> SessionState:
        """This state saying another torn tail: 0 once the writer cut it (the store's), or
        the tail an open cut before the file was read again (the reader's)."""
        return SessionState(
            self._path,
            self._header,
            self._tables,
            header_line=self._header_line,
            torn_tail_bytes=torn_tail_bytes,
        )

    def append_transaction(
        self, facts: Sequence[NewFact], at: int, write: Callable[[list[Fact], bytes], None]
    ) -> list[Fact]:
        """The store's commit, on its own state (never on one handed out): `facts` built
        and applied to the tables (`build_transaction`), their line given to `write`, then
        kept with it. Whatever raises (a refused fact, a failed write, a signal handler's
        exception) leaves the tables as they were, and is raised."""
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
        tables.lines.append(line)
        return built

    def __enter__(self) -> SessionState:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def path(self) -> str:
        """The file this state was read from (as it was named when opened)."""
        return self._path

    @property
    def header(self) -> Header:
        return self._header

    @property
    def torn_tail_bytes(self) -> int:
        """Bytes after the last complete line when the file was read (a write cut short)."""
        return self._torn_tail_bytes

    @property
    def header_line(self) -> bytes:
        """The header line's bytes as read, LF excluded."""
        return self._header_line

    # -- views -------------------------------------------------------------
    @property
    def transaction_count(self) -> int:
        """Lines after the header: one per committed transaction."""
        return len(self._tables.lines)

    @property
    def last_seq(self) -> int:
        return self._tables.last_seq

    @property
    def open_operation(self) -> Operation | None:
        op_id = self._tables.open_operation_id
        return None if op_id is None else self._tables.operations[op_id]

    @property
    def system_prompt(self) -> str | None:
        """The content of the latest systemPrompt record (docs/spec.md §7): what the model
        requests since it sent as their system message; None when none is recorded."""
        where = self._tables.system_prompt
        if where is None:
            return None
        fact = parse_transaction(self._tables.lines[where[0]])[where[1]]
        assert isinstance(fact, RecordFact) and isinstance(fact.record, SystemPrompt)
        return fact.record.content

    def transaction_bytes(self) -> Iterator[bytes]:
        """The transaction lines' bytes as the file holds them, every LF included, each
        read back checked (docs/session-format.md §8.1): what a fork copies."""
        return self._tables.lines.pieces()

    @property
    def facts(self) -> list[Fact]:
        """Every committed fact, decoded from the transaction lines: O(history), for tools
        and tests; the views above are what a running notebook reads."""
        return facts_of(self._tables.lines)

    @property
    def entries(self) -> EntryView:
        """Entries in commit order; each is decoded from its line when read."""
        return EntryView(self._tables.entries, self._tables.lines)

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
        for target, row in t.usage.items():
            attempt = t.attempts.get(target)
            owner = attempt.operation_id if attempt else t.intents[target].operation_id
            by_operation[owner].add(usage_of(row))
        return by_operation

    def copy(self) -> SessionState:
        t = self._tables
        tables = Tables(
            ids=dict(t.ids),
            entries=dict(t.entries),
            operations=dict(t.operations),
            attempts=dict(t.attempts),
            intents=dict(t.intents),
            intent_by_call=dict(t.intent_by_call),
            usage=dict(t.usage),
            consumed_inputs=dict(t.consumed_inputs),
            open_call_entries=dict(t.open_call_entries),
            windows=dict(t.windows),
            kernels=dict(t.kernels),
            lines=t.lines.copy(),
            totals=t.totals.copy(),
            last_seq=t.last_seq,
            open_operation_id=t.open_operation_id,
            last_cut=t.last_cut,
            system_prompt=t.system_prompt,
        )
        return SessionState(
            self._path,
            self._header,
            tables,
            header_line=self._header_line,
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
