"""The records `Tables.row` makes take their payload's fields by name."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from tiny_agent_nb.session._records import (
    ContextWindow,
    KernelOpened,
    OperationStarted,
)
from tiny_agent_nb.session._tables import (
    Kernel,
    LearnedWindow,
    Operation,
    _copied,
)

# What each record keeps of its payload. A payload field renamed without its record
# would otherwise leave the record's default (None) in place, silently.
TAKEN = [
    (
        Operation,
        OperationStarted,
        {
            "input_entry_id",
            "resumes_operation_id",
            "options",
            "cell_id",
            "replays_operation_id",
            "rewinds_operation_id",
        },
    ),
    (Kernel, KernelOpened, {"pid", "host", "started_at", "kernel_id", "notebook"}),
    (LearnedWindow, ContextWindow, {"tokens", "source"}),
]


@pytest.mark.parametrize(("record", "payload", "taken"), TAKEN)
def test_a_record_takes_the_payload_fields_it_names(
    record: type[tuple[object, ...]], payload: type[BaseModel], taken: set[str]
) -> None:
    fields: tuple[str, ...] = record._fields  # type: ignore[attr-defined]
    assert {mine for mine, _ in _copied(fields, payload)} == taken
