"""The durable session store (docs/session-format.md §1-§8): the deep module everything else
stands on.

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
    FileStoreError,
    InvalidTransactionError,
    NotASessionError,
    SessionClosedError,
    SessionCorruptError,
    SessionError,
    SessionLockedError,
    SessionReplacedError,
    SessionWriteError,
)
from ._facts import NewFact
from ._file_store import FileStore
from ._files import fsync_dir, read_session_file
from ._fork import fork_session, read_header
from ._ids import new_id
from ._models import (
    AssistantEntry,
    AssistantMessage,
    CompactionEntry,
    EntryFact,
    Fact,
    KernelNotice,
    RecordFact,
    ToolCall,
    ToolOutcome,
    ToolResultEntry,
    UsageFact,
    UserEntry,
)
from ._opening import Durability, HeaderInit
from ._reader import load_session, load_session_bytes
from ._records import (
    MAX_REPORTED,
    MAX_WINDOW,
    MIN_WINDOW,
    Approval,
    AttemptFailed,
    OperationOutcome,
    OperationStarted,
    ReplayPolicy,
    RunOptions,
    StepAttempt,
    ToolIdentity,
    ToolStarted,
    WindowSource,
)
from ._salvage import SalvageResult, salvage
from ._state import SessionState
from ._store import SessionStore
from ._tables import (
    Attempt,
    Kernel,
    LearnedWindow,
    Operation,
    Spend,
    ToolIntent,
)
from ._usage import UsageTotals, usage_in_range

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_REPORTED",
    "MAX_WINDOW",
    "MIN_WINDOW",
    "Approval",
    "AssistantEntry",
    "AssistantMessage",
    "Attempt",
    "AttemptFailed",
    "CompactionEntry",
    "Durability",
    "EntryFact",
    "Fact",
    "FileStore",
    "FileStoreError",
    "HeaderInit",
    "InvalidTransactionError",
    "Kernel",
    "KernelNotice",
    "LearnedWindow",
    "NewFact",
    "NotASessionError",
    "Operation",
    "OperationOutcome",
    "OperationStarted",
    "RecordFact",
    "ReplayPolicy",
    "RunOptions",
    "SalvageResult",
    "SessionClosedError",
    "SessionCorruptError",
    "SessionError",
    "SessionLockedError",
    "SessionReplacedError",
    "SessionState",
    "SessionStore",
    "SessionWriteError",
    "Spend",
    "StepAttempt",
    "ToolCall",
    "ToolIdentity",
    "ToolIntent",
    "ToolOutcome",
    "ToolResultEntry",
    "ToolStarted",
    "UsageFact",
    "UsageTotals",
    "UserEntry",
    "WindowSource",
    "canonical_json",
    "facts",
    "fork_session",
    "fsync_dir",
    "json_depth",
    "json_value_problem",
    "load_session",
    "load_session_bytes",
    "new_id",
    "read_header",
    "read_session_file",
    "replay_key",
    "salvage",
    "sha256_digest",
    "usage_in_range",
]
