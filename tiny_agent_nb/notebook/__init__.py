"""The notebook surface: `%%agent` magics, TinyAgent configuration, timeline widget."""

from ._config import TinyAgent
from ._magics import AgentMagics
from ._paths import resolve_session_path
from ._prompt import fill_prompt
from ._runtime import NotebookAgent, NotebookError
from ._widget import TimelineWidget

__all__ = [
    "AgentMagics",
    "NotebookAgent",
    "NotebookError",
    "TimelineWidget",
    "TinyAgent",
    "fill_prompt",
    "resolve_session_path",
]
