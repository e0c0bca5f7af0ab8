"""The kernels that open a session for writing, and the notice the model gets when the
conversation goes on in another one (docs/spec.md §9): how the reducer applies them.

A `kernelOpened` record refers to nothing and may come at any point, even while a run
is open (the previous kernel died inside it; recovery comes after the record). A
`kernelNotice` entry names the latest `kernelOpened`, at most once, and never lands
between a tool call and its result (a provider refuses a user message there).
"""

from __future__ import annotations

from ._models import EntryFact, KernelNotice, RecordFact
from ._records import KernelOpened
from ._tables import Kernel, Tables, Violation


def apply_kernel_opened(t: Tables, fact: RecordFact, body: KernelOpened) -> None:
    t.put(
        t.kernels,
        fact.id,
        Kernel(
            id=fact.id,
            opened_at=fact.at,
            pid=body.pid,
            host=body.host,
            started_at=body.startedAt,
            kernel_id=body.kernelId,
            notebook=body.notebook,
            entries_before=len(t.entries),
            intents_before=len(t.intents),
            operations_before=len(t.operations),
        ),
    )


def apply_kernel_notice(t: Tables, fact: EntryFact, body: KernelNotice) -> None:
    named = body.kernelOpenedId
    kernel = t.kernels.get(named)
    if kernel is None:
        raise Violation(f"kernelNotice names {named}, which is no kernelOpened record")
    latest = next(reversed(t.kernels))
    if named != latest:
        raise Violation(
            f"kernelNotice names kernelOpened {named}, not the latest kernel ({latest})"
        )
    if kernel.notice_id is not None:
        raise Violation(f"kernelOpened {named} already has its notice {kernel.notice_id}")
    op_id = t.open_operation_id
    if op_id is not None and t.operations[op_id].unanswered_tool_calls:
        raise Violation(
            f"kernelNotice while operation {op_id} has a tool call without a result "
            "(nothing may come between a tool call and its result)"
        )
    t.put(t.kernels, named, kernel._replace(notice_id=fact.id))
