"""The one error tree: every exception this package raises is a `TinyAgentError`.

    TinyAgentError                  catch this one for every error of tiny-agent-nb
    ├── SessionError                session: the store's errors
    │   ├── NotASessionError        session: no session here (empty, torn header, other data)
    │   ├── SessionCorruptError     session: a complete line is invalid (names file, line, why)
    │   ├── SessionLockedError      session: another writer holds the file (names its pid)
    │   ├── InvalidTransactionError session: a commit was refused; nothing was written
    │   ├── SessionWriteError       session: the OS refused a write; cut back, nothing committed
    │   ├── SessionReplacedError    session: the path names another file now; nothing committed
    │   ├── SessionClosedError      session: the store was closed
    │   └── FileStoreError          session: a file history blob is absent or damaged
    ├── Violation                   session: a fact breaks an invariant (said as one of the above)
    ├── ToolError                   tools: the tool could not do what was asked (told the model)
    │   ├── ToolArgumentError       tools: the arguments do not fit the tool's schema
    │   ├── OutsideWorkspaceError   tools: a path leads out of the workspace
    │   └── ToolTimeoutError        tools: the tool stopped at its time limit
    ├── ProviderError               provider: a request that produced no usable answer
    ├── UnsupportedEncoding         provider: a body in an encoding not decoded (a ValueError too)
    ├── McpConfigError              mcp: the MCP configuration cannot be used (a ValueError too)
    ├── NotRunningError             mcp: the server is not running
    ├── ServerRefused               mcp: what the server did cannot be used
    ├── RefusedAnswer               mcp: an answer not read (an httpx2.StreamError too)
    ├── AgentError                  agent: a request the loop cannot serve, or could not record
    ├── NoRoom                      agent: no compaction makes room in the context window
    ├── CompactionFailed            agent: the summarization request failed (recorded)
    ├── NotebookError               notebook: something the user must act on; says what and how
    │   └── SessionInUseError       notebook: another process writes the session (readable)
    └── PromptError                 notebook: a prompt's `{name}` names nothing (a ValueError too)

Each class lives with its package and is imported from there, as before (`from
tiny_agent_nb.session import SessionError`); this module holds the root, at the bottom
layer, so that every package may derive from it. A module's private control-flow errors
(a leading underscore) derive from the root too and are not drawn. tests/test_errors.py
holds this drawing to the classes: every one drawn, in its place, in its package.
"""

from __future__ import annotations

__all__ = ["TinyAgentError"]


class TinyAgentError(Exception):
    """Base class of every exception tiny-agent-nb raises."""
