"""The notebook surface: `%%agent` magics, TinyAgent configuration, timeline display."""

from ._config import TinyAgent
from ._extension import load, unload
from ._magics import AgentMagics
from ._opening import NotebookError
from ._paths import resolve_session_path
from ._prompt import fill_prompt
from ._runtime import NotebookRuntime
from ._timeline_view import TimelineView

__all__ = [
    "AgentMagics",
    "NotebookError",
    "NotebookRuntime",
    "TimelineView",
    "TinyAgent",
    "fill_prompt",
    "load",
    "resolve_session_path",
    "unload",
]
