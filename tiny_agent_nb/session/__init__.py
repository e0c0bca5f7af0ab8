"""The durable session store (docs/spec.md §2-§8): the deep module everything else stands on.

store = SessionStore.open(path, create=HeaderInit(...))
committed = store.commit([facts.user_message("hi", id=entry_id), facts.run_started(...)])
state = store.load()
store.close()
"""

from . import _facts as facts
from ._canonical import (
    MAX_JSON_DEPTH,
    canonical_json,
    json_depth,
    json_value_problem,
    replay_key,
    sha256_digest,
)
from ._exceptions import (
    InvalidTransactionError,
    NotASessionError,
    SessionClosedError,
    SessionCorruptError,
    SessionError,
    SessionLockedError,
)
from ._facts import NewFact
from ._ids import is_uuid7, new_id
from ._models import (
    FORMAT_VERSION,
    MAX_EPOCH_MS,
    AbortRequested,
    AssistantEntry,
    AssistantMessage,
    AttemptError,
    AttemptFailed,
    CompactionEntry,
    EntryFact,
    Fact,
    Header,
    OperationFinished,
    OperationKind,
    OperationOutcome,
    RecordFact,
    RunStarted,
    StepAttempt,
    ToolCall,
    ToolIdentity,
    ToolMessage,
    ToolResultEntry,
    ToolStarted,
    Usage,
    UsageFact,
    UserEntry,
    UserMessage,
)
from ._reader import load_session, load_session_bytes
from ._salvage import SalvageResult, salvage
from ._state import EntryView, SessionState
from ._store import Durability, HeaderInit, SessionStore, SessionWriteError
from ._tables import Attempt, Operation, ToolIntent, UsageTotals

__all__ = [
    "FORMAT_VERSION",
    "MAX_EPOCH_MS",
    "MAX_JSON_DEPTH",
    "AbortRequested",
    "AssistantEntry",
    "AssistantMessage",
    "Attempt",
    "AttemptError",
    "AttemptFailed",
    "CompactionEntry",
    "Durability",
    "EntryFact",
    "EntryView",
    "Fact",
    "Header",
    "HeaderInit",
    "InvalidTransactionError",
    "NewFact",
    "NotASessionError",
    "Operation",
    "OperationFinished",
    "OperationKind",
    "OperationOutcome",
    "RecordFact",
    "RunStarted",
    "SalvageResult",
    "SessionClosedError",
    "SessionCorruptError",
    "SessionError",
    "SessionLockedError",
    "SessionState",
    "SessionStore",
    "SessionWriteError",
    "StepAttempt",
    "ToolCall",
    "ToolIdentity",
    "ToolIntent",
    "ToolMessage",
    "ToolResultEntry",
    "ToolStarted",
    "Usage",
    "UsageFact",
    "UsageTotals",
    "UserEntry",
    "UserMessage",
    "canonical_json",
    "facts",
    "is_uuid7",
    "json_depth",
    "json_value_problem",
    "load_session",
    "load_session_bytes",
    "new_id",
    "replay_key",
    "salvage",
    "sha256_digest",
]
