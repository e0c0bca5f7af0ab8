"""Kernel boundaries: where the kernel that wrote a run differs from the previous run's
(docs/spec.md §9)."""

from __future__ import annotations

from ..session import Kernel, KernelNotice, SessionState
from ._rows import KernelRow


def kernel_boundaries(state: SessionState) -> tuple[dict[int, KernelRow], KernelRow | None]:
    """The kernel boundary before each run (by its 0-based index) whose kernel is another
    process than the previous run's; and the latest kernel, when it wrote no run yet and
    is not the last run's."""
    kernels = list(state.kernels.values())
    numbers = dict.fromkeys((k.id for k in kernels), 0)
    for k, kernel in enumerate(kernels):
        new = k == 0 or not kernel.same_process(kernels[k - 1])
        numbers[kernel.id] = (numbers[kernels[k - 1].id] if k else 0) + new
    writers = state.run_kernels()
    boundaries = {
        n: _kernel_row(state, writer, numbers[writer.id])
        for n, writer in enumerate(writers)
        if writer is not None and _another(writer, writers[n - 1] if n else None)
    }
    latest, last = (kernels[-1] if kernels else None), (writers[-1] if writers else None)
    if latest is not None and latest.operations_before == len(writers) and _another(latest, last):
        return boundaries, _kernel_row(state, latest, numbers[latest.id])
    return boundaries, None


def _another(kernel: Kernel, before: Kernel | None) -> bool:
    return before is None or not kernel.same_process(before)


def _kernel_row(state: SessionState, kernel: Kernel, number: int) -> KernelRow:
    notice = None
    if kernel.notice_id is not None:
        body = state.entries[kernel.notice_id].entry
        notice = body.message.content if isinstance(body, KernelNotice) else None
    return KernelRow(
        id=kernel.id,
        number=number,
        opened_at=kernel.opened_at,
        started_at=kernel.started_at,
        pid=kernel.pid,
        host=kernel.host,
        kernel_id=kernel.kernel_id,
        notebook=kernel.notebook,
        notice=notice,
    )
