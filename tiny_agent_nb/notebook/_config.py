"""`TinyAgent`: the traitlets Configurable behind `%config TinyAgent.<trait> = ...`.

Precedence: explicit configuration (`%config`, ipython_config.py) > environment
variables > defaults. The API key is held in a `Secret` so `%config TinyAgent`, reprs and
tracebacks show `Secret('****')`, never the key.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args
from urllib.parse import urlsplit

from traitlets import (
    Bool,
    Enum,
    Float,
    Instance,
    Int,
    List,
    TraitType,
    Unicode,
    default,
    validate,
)
from traitlets.config import Configurable

from ..agent import (
    DEFAULT_APPROVAL,
    DEFAULT_COMPACT_THRESHOLD,
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_KEEP_TAIL_TOKENS,
    DEFAULT_MAX_STEPS,
)
from ..mcp import DEFAULT_CALL_TIMEOUT, DEFAULT_START_TIMEOUT
from ..provider import (
    ATTEMPT_TIMEOUT,
    MAX_RESPONSE_BYTES,
    OPENROUTER_BASE_URL,
    READ_TIMEOUT,
)
from ..redaction import redact_url, url_secrets
from ..session import Approval, FileStore
from ..tools import KEY_VARIABLES, builtin_registry
from ._mcp_value import shown_value, value_secrets

DEFAULT_MODEL = "deepseek/deepseek-v4-flash-0731"


class Secret:
    """A string that does not print itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('****')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class SecretTrait(TraitType[Secret | None, Secret | str | None]):
    default_value = None
    allow_none = True
    info_text = "an API key (shown as Secret('****'))"

    def validate(self, obj: Any, value: Any) -> Secret | None:
        if value is None or isinstance(value, Secret):
            return value
        if isinstance(value, str):
            return Secret(value.strip()) if value.strip() else None
        self.error(obj, value)
        return None  # unreachable: error() raises


class TinyAgent(Configurable):
    """Durable agent notebooks: model endpoint, tools, approval and session file."""

    model = Unicode(
        help="Model id, e.g. deepseek/deepseek-v4-flash-0731 (env TINY_AGENT_MODEL)."
    ).tag(config=True)
    base_url = Unicode(
        help="OpenAI-compatible endpoint (env TINY_AGENT_BASE_URL); OpenRouter by default. "
        "Local: http://127.0.0.1:8080/v1 (llama.cpp), http://127.0.0.1:11434/v1 (Ollama), "
        "http://127.0.0.1:8000/v1 (vLLM). Credentials in it (user:password@, ?key=...) are "
        "sent but shown as ****."
    ).tag(config=True)
    api_key = SecretTrait(
        help="API key (env TINY_AGENT_API_KEY, else OPENROUTER_API_KEY). A local server needs none."
    ).tag(config=True)
    provider = Unicode(
        "",
        help="Label written to the session file (default: 'openrouter' for OpenRouter, "
        "else 'openai-compatible'; derived at each run, so a later %config of base_url "
        "is labelled right).",
    ).tag(config=True)
    max_steps = Int(
        DEFAULT_MAX_STEPS, help="Model steps per run before it stops with outcome stepLimit."
    ).tag(config=True)
    budget = Float(
        None,
        allow_none=True,
        help="USD a run may spend (its resumes included) before it stops with outcome "
        "budgetLimit; checked before each model request and each tool call. None: no limit.",
    ).tag(config=True)
    context_window = Int(
        None,
        allow_none=True,
        help="Tokens the model's context holds; set, it wins. None: the window the session "
        "learned for the model (`%agent forget-window` clears it), else the one the server "
        f"lists for it (asked once per kernel), else {DEFAULT_CONTEXT_WINDOW}.",
    ).tag(config=True)
    compact_threshold = Float(
        DEFAULT_COMPACT_THRESHOLD,
        help="Part of context_window past which a run compacts before its next request.",
    ).tag(config=True)
    keep_tail_tokens = Int(
        DEFAULT_KEEP_TAIL_TOKENS,
        help="Tokens of the newest conversation a compaction keeps verbatim.",
    ).tag(config=True)
    approve = Enum(
        list(get_args(Approval)),
        default_value=DEFAULT_APPROVAL,
        help="Tools that change things (write_file, edit_file, bash, python): run (auto), "
        "ask first (ask), or refuse (deny). Reads always run.",
    ).tag(config=True)
    tools = List(
        Unicode(),
        help="Tools the agent may use (default: all built-ins and every MCP tool). MCP tools "
        "by name (time__get_current_time) or by server (time__*).",
    ).tag(config=True)
    user_cells_chars = Int(
        4000,
        help="Characters of the cells you ran since the previous agent cell (each cell's "
        "code and the error it raised) that a %%agent prompt carries, in its user entry; 0 "
        "sends none. The newest cells come first; older ones are left out and counted.",
    ).tag(config=True)
    file_history_max_file = Int(
        FileStore.MAX_FILE,
        help="Bytes of a file write_file or edit_file changes that its file history keeps "
        "(before and after, each), so a rewind can restore it; past it the change is made "
        "and recorded as not restorable.",
    ).tag(config=True)
    file_history_max_session = Int(
        FileStore.MAX_SESSION,
        help="Bytes of file history one session keeps (under $XDG_STATE_HOME/tiny-agent-nb/"
        "files/); past it changes are made and recorded as not restorable.",
    ).tag(config=True)
    session_path = Unicode(
        None, allow_none=True, help="Session file; default: beside the notebook (NAME.agent.jsonl)."
    ).tag(config=True)
    workspace = Unicode(help="Directory the file tools act on (default: the kernel's cwd).").tag(
        config=True
    )
    durability = Enum(
        ["process", "power"],
        default_value="process",
        help="process: survives kernel crashes; power: also power loss (an fsync before each "
        "model request and tool run, docs/session-format.md §6.2).",
    ).tag(config=True)
    system_prompt = Unicode(None, allow_none=True, help="Replaces the default system prompt.").tag(
        config=True
    )
    stream = Bool(True, help="Stream answers as they are produced.").tag(config=True)
    demo = Bool(
        help="With no API key and no base URL configured, use the offline demo model "
        "(scripted, not a real LLM; env TINY_AGENT_DEMO=0 turns it off)."
    ).tag(config=True)
    request_timeout = Int(
        int(READ_TIMEOUT), help="Seconds to wait for the next byte of a model response."
    ).tag(config=True)
    attempt_timeout = Float(
        ATTEMPT_TIMEOUT,
        help="Seconds one model request may take, first byte sent to last byte read, before "
        "it is cut off and retried (a server that trickles or only sends keep-alives).",
    ).tag(config=True)
    max_response_bytes = Int(
        MAX_RESPONSE_BYTES,
        help="Bytes one model answer may take before it is cut off and the run fails (an "
        "answer that never ends); 64 MiB holds a 64k-token streamed answer twice over.",
    ).tag(config=True)
    extra = Instance(dict, args=(), help="Extra sampling parameters (temperature, top_p...).").tag(
        config=True
    )
    mcp_servers = Unicode(
        help='MCP servers whose tools the agent may call: the JSON {"mcpServers": {NAME: '
        '{"command", "args", "env", "cwd"} | {"url", "headers"}}} other MCP clients use, or '
        "a path to a file holding it (env TINY_AGENT_MCP_SERVERS). Empty: none. Env and "
        "header values and URL credentials are sent to the servers only and shown as ****."
    ).tag(config=True)
    mcp_start_timeout = Float(
        DEFAULT_START_TIMEOUT,
        help="Seconds an MCP server may take to start (spawn or connect, initialize, list "
        "its tools) before it is reported as failed; the run goes on without it.",
    ).tag(config=True)
    mcp_call_timeout = Float(
        DEFAULT_CALL_TIMEOUT,
        help="Seconds one MCP tool call may take before it ends as an error result.",
    ).tag(config=True)

    @default("model")
    def _default_model(self) -> str:
        return os.environ.get("TINY_AGENT_MODEL") or DEFAULT_MODEL

    # The base URL and the MCP configuration as given, secrets included: the traits hold
    # the forms `%config TinyAgent`, reprs and tracebacks may show (`_hidden`).
    _endpoint: Secret | None = None
    _mcp_source: Secret | None = None

    @default("base_url")
    def _default_base_url(self) -> str:
        return self._hide_url(os.environ.get("TINY_AGENT_BASE_URL") or OPENROUTER_BASE_URL)

    @validate("base_url")
    def _hide_credentials(self, proposal: Any) -> str:
        return self._hide_url(str(proposal["value"]))

    def _hide_url(self, url: str) -> str:
        self._endpoint, shown = _hidden(self._endpoint, url, redact_url)
        return shown

    def endpoint(self) -> str:
        """The base URL requests go to, credentials included: for the provider only."""
        shown = self.base_url  # first: computing the default is what keeps its credentials
        return self._endpoint.reveal() if self._endpoint is not None else shown

    @default("mcp_servers")
    def _default_mcp_servers(self) -> str:
        return self._hide_mcp(os.environ.get("TINY_AGENT_MCP_SERVERS", ""))

    @validate("mcp_servers")
    def _hide_mcp_secrets(self, proposal: Any) -> str:
        return self._hide_mcp(str(proposal["value"]))

    def _hide_mcp(self, value: str) -> str:
        self._mcp_source, shown = _hidden(self._mcp_source, value, shown_value)
        return shown

    def mcp_source(self) -> str:
        """The MCP configuration with its secrets: for starting the servers only."""
        shown = self.mcp_servers  # first: computing the default is what keeps the source
        return self._mcp_source.reveal() if self._mcp_source is not None else shown

    @default("api_key")
    def _default_api_key(self) -> Secret | None:
        name = _key_variable()
        return Secret(os.environ[name].strip()) if name is not None else None

    @default("demo")
    def _default_demo(self) -> bool:
        return os.environ.get("TINY_AGENT_DEMO", "1").strip().lower() not in ("0", "false", "no")

    def demo_mode(self) -> bool:
        """No key and the default (OpenRouter) endpoint: nothing real to talk to."""
        return self.demo and self.api_key is None and self.base_url == OPENROUTER_BASE_URL

    def provider_label(self) -> str:
        """The provider written to stepAttempts: explicit, else from the current endpoint
        (the offline demo model's is its own: `SessionModel.asked`)."""
        if self.provider:
            return self.provider
        return "openrouter" if is_openrouter(self.base_url) else "openai-compatible"

    @default("tools")
    def _default_tools(self) -> list[str]:
        return list(builtin_registry().names)

    @default("workspace")
    def _default_workspace(self) -> str:
        return str(Path.cwd())

    @validate("max_steps")
    def _positive_steps(self, proposal: Any) -> int:
        value = int(proposal["value"])
        if value < 1:
            raise ValueError("max_steps must be at least 1")
        return value

    @validate("budget")
    def _positive_budget(self, proposal: Any) -> float | None:
        value = proposal["value"]
        if value is not None and not (0 < value < float("inf")):  # also refuses NaN
            raise ValueError(f"TinyAgent.budget must be a positive number of USD, not {value!r}")
        return value  # type: ignore[no-any-return]

    @validate("user_cells_chars")
    def _not_negative(self, proposal: Any) -> int:
        value = int(proposal["value"])
        if value < 0:
            raise ValueError(f"TinyAgent.user_cells_chars must be 0 (none) or more, not {value}")
        return value

    @validate("attempt_timeout", "max_response_bytes", "mcp_start_timeout", "mcp_call_timeout")
    def _positive_limit(self, proposal: Any) -> Any:
        value = proposal["value"]
        if not value > 0:  # also refuses NaN
            raise ValueError(f"TinyAgent.{proposal['trait'].name} must be positive, not {value!r}")
        return value

    def file_store(self, session_id: str) -> FileStore:
        """Session `session_id`'s file history, under this configuration's caps: what its
        runs keep and what a rewind may keep of a file it overwrites."""
        return FileStore.for_session(
            session_id,
            max_file=self.file_history_max_file,
            max_session=self.file_history_max_session,
        )

    def secrets(self) -> tuple[str, ...]:
        """What tools must never show or pass on: the key (as configured and as found in
        the environment), every credential the base URL carries (`url_secrets`, the
        same list the provider scrubs its own messages with), and the MCP servers' env
        values, header values and URL credentials (a server may echo them)."""
        found = [self.api_key.reveal()] if self.api_key is not None else []
        found += [os.environ.get(name, "").strip() for name in KEY_VARIABLES]
        found += url_secrets(self.endpoint())
        found += value_secrets(self.mcp_source())
        return tuple(s for s in dict.fromkeys(found) if s)

    def api_key_source(self) -> str:
        """Where the key was (or would be) found, for error messages: never the key."""
        return _key_variable() or (
            "TINY_AGENT_API_KEY or OPENROUTER_API_KEY (or %config TinyAgent.api_key)"
        )


def _hidden(kept: Secret | None, value: str, shown: Callable[[str], str]) -> tuple[Secret, str]:
    """What a trait with secrets keeps and shows for `value`: the shown form of what it
    keeps, set back (`%config` reading the trait and writing it again), stands for it."""
    if kept is not None and value != kept.reveal() and shown(kept.reveal()) == value:
        return kept, value
    return Secret(value), shown(value)


def _key_variable() -> str | None:
    """The environment variable the API key is taken from, if one holds it."""
    names = ("TINY_AGENT_API_KEY", "OPENROUTER_API_KEY")
    return next((name for name in names if os.environ.get(name, "").strip()), None)


def is_openrouter(base_url: str) -> bool:
    """Whether the endpoint's host is OpenRouter's (not merely a URL mentioning it, as
    `http://openrouter.ai@elsewhere/` or `?next=openrouter.ai` do)."""
    try:
        host = urlsplit(base_url).hostname or ""
    except ValueError:  # e.g. an unclosed "[" of an IPv6 address: not OpenRouter's
        return False
    return host == "openrouter.ai" or host.endswith(".openrouter.ai")
