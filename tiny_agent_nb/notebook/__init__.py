"""The notebook surface: `%%agent` magics, TinyAgent configuration, timeline display."""

from ._config import TinyAgent
from ._extension import load, unload
from ._links import resolve_session_path
from ._opening import NotebookError
from ._runtime import NotebookRuntime

__all__ = [
    "NotebookError",
    "NotebookRuntime",
    "TinyAgent",
    "load",
    "resolve_session_path",
    "unload",
]
