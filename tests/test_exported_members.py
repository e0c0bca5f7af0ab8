"""Every subpackage's public surface is what its __all__ says (as httpx's test does): each
name in it exists, no public name is missing from it, and what it exports is its own."""

from __future__ import annotations
import __future__

import importlib
import inspect
from types import ModuleType

import pytest

import tiny_agent_nb

SUBPACKAGES = ["session", "provider", "tools", "mcp", "agent", "notebook", "cli", "timeline"]


def _package(name: str) -> ModuleType:
    return importlib.import_module(f"tiny_agent_nb.{name}")


def _public_names(package: ModuleType) -> set[str]:
    """Names a user can import from the package, bar the modules it imported for its own
    use (`os`, `sys`) and `from __future__ import annotations`."""
    names = set()
    for name, value in vars(package).items():
        if name.startswith("_") or isinstance(value, __future__._Feature):
            continue
        if inspect.ismodule(value) and not value.__name__.startswith(package.__name__):
            continue
        names.add(name)
    return names


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_every_exported_name_exists(name: str) -> None:
    package = _package(name)
    assert len(set(package.__all__)) == len(package.__all__), "a name is exported twice"
    missing = [member for member in package.__all__ if not hasattr(package, member)]
    assert not missing
    assert not [member for member in package.__all__ if member.startswith("_")]


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_no_public_name_is_missing_from_all(name: str) -> None:
    package = _package(name)
    assert _public_names(package) - set(package.__all__) == set()


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_a_package_exports_only_what_it_defines(name: str) -> None:
    # One home per concept: a class or function re-exported from another package would
    # give it two names to import it by.
    package = _package(name)
    foreign = []
    for member in package.__all__:
        value = getattr(package, member)
        defined = inspect.isclass(value) or inspect.isfunction(value)
        if defined and not value.__module__.startswith(package.__name__):
            foreign.append(f"{member} (from {value.__module__})")
    assert not foreign


# What each package exports, exactly: a name stays only while a user or another layer
# imports it (another layer's tests included: test_layers keeps a test to the private
# modules of its own layer). A name only its own layer's tests need is imported from its
# private module (`tiny_agent_nb.tools._bash.Bash`), so the surface stays short.
EXPORTS: dict[str, set[str]] = {
    "session": {
        # the store, reading, salvage
        "SessionStore",
        "HeaderInit",
        "Durability",
        "SessionState",
        "load_session",
        "load_session_bytes",  # the in-memory reader property tests use
        "read_session_file",
        "fsync_dir",
        "salvage",
        "SalvageResult",
        "fork_session",
        "next_archive_path",  # the name of a notebook's other conversations (a fork's too)
        "read_header",
        # the drawn error tree
        "SessionError",
        "NotASessionError",
        "SessionCorruptError",
        "SessionLockedError",
        "SessionReplacedError",
        "InvalidTransactionError",
        "SessionWriteError",
        "SessionClosedError",
        "FileStoreError",
        # the file history: blobs of files before and after a tool changed them
        "FileStore",
        "ForkRefusedError",
        # facts and what they hold, as the agent, tools, provider and timeline read them
        "facts",
        "NewFact",
        "Fact",
        "EntryFact",
        "RecordFact",
        "UsageFact",
        "OperationStarted",
        "RunOptions",
        "Approval",
        "StepAttempt",
        "AttemptFailed",
        "WindowSource",
        "LearnedWindow",
        "UserEntry",
        "AssistantEntry",
        "AssistantMessage",
        "ToolCall",
        "ToolResultEntry",
        "CompactionEntry",
        "KernelNotice",
        "ToolStarted",
        "ToolIdentity",
        "ReplayPolicy",
        "ToolOutcome",
        "OperationOutcome",
        # the reduced tables
        "Operation",
        "Attempt",
        "ToolIntent",
        "Kernel",
        "UsageTotals",
        "Spend",
        # ids, digests, values
        "new_id",
        "canonical_json",
        "replay_key",
        "sha256_digest",
        "json_depth",
        "json_value_problem",
        "MAX_JSON_DEPTH",
        # the bound a usage fact is believed up to (docs/spec.md §4)
        "MAX_REPORTED",
        "usage_in_range",
        # the context windows a session believes (docs/spec.md §8)
        "MAX_WINDOW",
        "MIN_WINDOW",
    },
    "agent": {
        "AgentLoop",
        "LoopConfig",
        "LoopObserver",
        "ChatProvider",
        "RunResult",
        "AgentError",
        "DEFAULT_CONTEXT_WINDOW",
        "describe_origin",  # where a window comes from, in the same words everywhere
        # the loop's defaults, which TinyAgent's traits take
        "DEFAULT_MAX_STEPS",
        "DEFAULT_COMPACT_THRESHOLD",
        "DEFAULT_KEEP_TAIL_TOKENS",
        "DEFAULT_APPROVAL",
        "notebook_system_prompt",
        "build_context",  # what the model is sent (docs/spec.md §3)
        "RecoveryReport",
        "plan_recovery",
        "resumable_operation",
        "resumable_run",
        # what the model is told of a call no process finished (the demo model reads them)
        "INTERRUPTED_RESULT",
        "NOT_STARTED",
        # a replayed run (docs/spec.md §12): what it did, which calls it runs again
        "Replayed",
        "reruns_of",
        "Compacted",
        "compaction_line",
        "compaction_status",
        # why a run stopped at a limit, with its figures (each surface advises)
        "StopReason",
        "BudgetReached",
        "StepsReached",
        "ContextFull",
        # why no compaction can make room, with its figures (each surface advises)
        "FixedFill",
        "NoCleanCut",
        # a rewind (docs/spec.md §17): its plan, and the rewind carried out
        "RewindPlan",
        "plan_rewind",
        "operation_numbered",
        "undo_target",
        "carry_out",
        "interrupted_rewind",
    },
    "provider": {
        "Provider",
        "ProviderConfig",
        "ProviderError",
        "http_client",
        "messages",  # the provider-neutral messages the agent builds
        "wire",
        "Completion",
        "UsageReport",
        "StreamEvent",
        "TextDelta",
        "ReasoningDelta",
        "ToolCallStarted",
        "Waiting",
        "backoff_delay",
        "plausible_window",  # the one test of a believable window, the agent's too
        "DemoProvider",
        "DEMO_LABEL",
        "DEMO_MODEL",
        "DEMO_PROVIDER",
        # TinyAgent's defaults
        "OPENROUTER_BASE_URL",
        "ATTEMPT_TIMEOUT",
        "READ_TIMEOUT",
        "MAX_RESPONSE_BYTES",
        "METADATA_SECONDS",
        # the body decoding MCP's HTTP transport shares
        "ACCEPT_ENCODING",
        "BodyDecoder",
        "UnsupportedEncoding",
    },
    "tools": {
        "Tool",
        "ToolRegistry",
        "builtin_registry",
        "NOTEBOOK_TOOLS",  # not offered to a run with no notebook (notebook/_loops.py)
        "ReadFile",  # the built-in tool other layers' tests build theirs on
        "ToolContext",
        "ToolArguments",
        "ToolOutput",
        "ToolSchema",
        "ToolUsage",
        "ToolError",
        "ToolArgumentError",
        "OutsideWorkspaceError",
        "KEY_VARIABLES",  # TinyAgent.tool_env's default
        "change_diff",  # a cell change as the user reviews it
        "CELL_CHANGE_APPLIED",  # how a cell change's result begins: a rewind finds those applied
        "clean_text",
        "truncate",
        "unescape_path",
        "parent_directory",  # a rewind restores files through the walk file tools use
        # the notebook as tools see it, which the notebook layer implements
        "Notebook",
        "NotebookCell",
        "NotebookCells",
        "CellChange",
        "CellType",
        "ApplyOutcome",
    },
    "mcp": {
        "McpServers",
        "ServerStatus",
        "McpConfig",
        "McpConfigError",
        "parse_config",
        "read_config_file",
        "is_json_text",
        "DEFAULT_CALL_TIMEOUT",  # TinyAgent.mcp_call_timeout's default
        "DEFAULT_START_TIMEOUT",  # TinyAgent.mcp_start_timeout's default
    },
    "notebook": {
        "TinyAgent",
        "NotebookError",
        "load",
        "unload",
        # the runtime without a shell, as the agent's and provider's tests drive it
        "NotebookRuntime",
        "resolve_session_path",
    },
    "cli": {"main"},
    "timeline": {
        "build_timeline",
        "Timeline",
        "RunRow",
        "AttemptRow",
        "ToolRow",
        "KernelRow",
        "Totals",
        "PAGE_SIZE",
        "ROWS_PER_RUN",
        "compactions",
        "intent_label",
        "outcome_note",
        "replay_note",
        "call_outcome",  # how a call ended, as `inspect` and `%agent status` say it
        "rewinds_text",
        "runs_text",  # the runs, as `inspect` and `%agent status` say them
        "run_text",
        "ModelName",
        "session_models",
        "RunUsage",
        "usage_by_run",
        "usage_lines",
        "session_cost",
        "cost_text",
    },
}


def test_every_subpackage_has_its_exports_pinned() -> None:
    assert set(EXPORTS) == set(SUBPACKAGES)


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_a_package_exports_what_users_and_the_other_layers_use(name: str) -> None:
    assert set(_package(name).__all__) == EXPORTS[name]


def test_package_has_a_version() -> None:
    assert tiny_agent_nb.__version__
