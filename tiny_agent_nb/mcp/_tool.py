"""An MCP server's tool as a `Tool` the agent loop can call.

`run` is called on the kernel's thread; the call itself runs on the loop thread, as a
task of its own, and `run` waits on it in short slices. Ctrl-C cancels that task: the
SDK then sends `notifications/cancelled` for the request (its courtesy cancel), which
`run` gives a bounded moment to go out before it lets KeyboardInterrupt through.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib
import importlib.util
import sys
import threading
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ConfigDict

from ..redaction import redact
from ..session import ReplayPolicy, ToolIdentity
from ..tools import (
    Tool,
    ToolArgumentError,
    ToolArguments,
    ToolContext,
    ToolOutput,
    ToolSchema,
    truncate,
)
from ._result import result_text, result_usage
from ._server import NotRunningError, ServerRefused, ServerSession
from ._thread import LoopThread, wait_done, wait_event

if TYPE_CHECKING:
    import mcp_types
    from jsonschema.protocols import Validator  # type: ignore[import-untyped]

__all__ = ["McpTool", "checking_validator"]

# How long a cancelled call is given to send notifications/cancelled and unwind.
CANCEL_GRACE = 2.0


class McpArguments(ToolArguments):
    """The arguments of an MCP call, kept as they were sent (the server's JSON Schema, not
    a pydantic model, says what fits)."""

    model_config = ConfigDict(extra="allow", strict=False, frozen=True)


class McpTool(Tool):
    replay_policy: ClassVar[ReplayPolicy] = "never"
    Arguments: ClassVar[type[ToolArguments]] = McpArguments

    def __init__(
        self,
        *,
        name: str,
        server: ServerSession,
        tool: mcp_types.Tool,
        loop: LoopThread,
        call_timeout: float,
    ) -> None:
        """ServerRefused when the server's input schema for the tool is invalid."""
        # Per instance, where a built-in tool has class attributes: the names come from
        # the server at runtime.
        self.name = name  # type: ignore[misc]
        self.description = server.kept(tool.description or "")  # type: ignore[misc]
        self.version = server.version or "unknown"  # type: ignore[misc]
        self.source = f"mcp:{server.config.name}"  # type: ignore[misc]
        self.remote_name = tool.name  # what the server is called with
        self._kept_name = server.kept(tool.name)  # what the file says
        self._server = server
        self._input_schema = dict(tool.input_schema)
        self._validator = checking_validator(self._input_schema)
        self._loop = loop
        self._call_timeout = call_timeout
        self._secrets = server.config.secrets()

    def __repr__(self) -> str:
        return f"McpTool({self.name!r}, server={self._server.config.name!r})"

    @property
    def identity(self) -> ToolIdentity:
        return ToolIdentity(name=self._kept_name, version=self.version, source=self.source)

    def schema(self) -> ToolSchema:
        return ToolSchema(
            name=self.name,
            version=self.version,
            description=self.description,
            parameters=self._input_schema,
        )

    def parse_arguments(self, arguments: dict[str, Any]) -> ToolArguments:
        from referencing.exceptions import Unresolvable  # noqa: PLC0415

        try:
            errors = sorted(
                self._validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path]
            )
        except (Unresolvable, RecursionError) as exc:
            # The server's schema, not the model's call, is at fault (a "$ref" to nowhere,
            # or one that is never fetched: see checking_validator).
            raise ToolArgumentError(
                f"the input schema MCP server {self._server.config.name} gave for "
                f"{self.remote_name} cannot be checked ({type(exc).__name__}: "
                f"{str(exc)[:200]}), so no call of it is sent"
            ) from None
        if errors:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}"
                for e in errors[:5]
            )
            raise ToolArgumentError(f"invalid arguments for {self.name}: {problems}")
        return McpArguments.model_construct(**arguments)

    def effective_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments as sent: an MCP server fills its own defaults, and recording ones
        it might not use would misstate the call."""
        self.parse_arguments(arguments)
        return dict(arguments)

    def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        server = self._server.config.name
        done = threading.Event()
        try:
            future = self._loop.submit(self._server.call(self.remote_name, arguments, done))
        except RuntimeError:  # the loop is closed: the servers were closed
            return ToolOutput(self._server.not_running(), is_error=True)
        try:
            if not wait_done([future], self._call_timeout):
                self._abandon(future, done)
                return ToolOutput(
                    f"MCP server {server} did not answer {self.remote_name} within "
                    f"{self._call_timeout:g} s; the call was cancelled, and whether it had "
                    "an effect is unknown",
                    is_error=True,
                    timed_out=True,
                )
            result = future.result()
        except KeyboardInterrupt:
            self._abandon(future, done)
            raise
        except NotRunningError as exc:
            return ToolOutput(str(exc), is_error=True)
        except concurrent.futures.CancelledError:
            return ToolOutput(self._server.not_running(), is_error=True)
        except Exception as exc:  # already redacted and described by ServerSession.call
            return ToolOutput(
                f"MCP server {server}: {self.remote_name} failed: {exc}", is_error=True
            )
        # The server's own secrets (its env, its headers) are redacted here too, not only
        # by the loop with context.secrets: a server that echoes its env is common.
        text = redact(truncate(result_text(result), context.output_limit), self._secrets)
        return ToolOutput(
            text,
            is_error=bool(result.is_error),
            usage=result_usage(result),
        )

    def _abandon(self, future: concurrent.futures.Future[Any], done: threading.Event) -> None:
        """Cancel the call's task and give the cancellation notice a moment to go out."""
        future.cancel()
        wait_event(done, CANCEL_GRACE)


def checking_validator(schema: dict[str, Any]) -> Validator:
    """The validator the model's arguments are checked with before the intent is committed;
    ServerRefused when `schema` is no valid JSON Schema.

    It never fetches: a `$ref` to a URL would make the kernel request whatever address a
    server names (jsonschema's default still retrieves remote references); an empty
    registry makes such a reference unresolvable instead. And it runs none of the server's
    regular expressions (`pattern`, `patternProperties`): Python's matcher backtracks, so a
    pattern like `^(a+)+$` and a 40-character argument would hold the kernel's thread for
    hours where Ctrl-C cannot reach it. The server checks its own patterns on the call.
    """
    _import_jsonschema()
    # jsonschema (a dependency of the SDK) ships no type stubs.
    from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]  # noqa: PLC0415
    from jsonschema.validators import (  # type: ignore[import-untyped]  # noqa: PLC0415
        Draft202012Validator,
        validator_for,
    )
    from referencing import Registry  # noqa: PLC0415

    cls: Any = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ServerRefused(
            f"the server's input schema for it is invalid ({exc.message[:200]})"
        ) from None
    return _without_regexes(cls)(schema, registry=Registry())


def _import_jsonschema() -> None:
    """Import jsonschema with rfc3987-syntax's import put off to its first IRI format check.

    jsonschema imports rfc3987-syntax (where installed, as Jupyter installs it) for its
    format checker, and that import builds a grammar: ~2 s of a kernel's first tool
    listing, for a checker no MCP validation uses. Only the name jsonschema takes from it
    stands in until then; the module itself is imported as usual by whoever asks for it.
    """
    if "jsonschema" in sys.modules or "rfc3987_syntax" in sys.modules:
        return
    if importlib.util.find_spec("rfc3987_syntax") is None:
        return
    stand_in = types.ModuleType("rfc3987_syntax")

    def is_valid_syntax(*args: Any, **kwargs: Any) -> Any:
        return importlib.import_module("rfc3987_syntax").is_valid_syntax(*args, **kwargs)

    stand_in.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    sys.modules["rfc3987_syntax"] = stand_in
    try:
        import jsonschema  # type: ignore[import-untyped]  # noqa: F401, PLC0415
    finally:
        del sys.modules["rfc3987_syntax"]


@functools.cache
def _without_regexes(cls: Any) -> Any:
    from jsonschema.validators import extend  # noqa: PLC0415

    additional = cls.VALIDATORS.get("additionalProperties")

    def skip(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        return iter(())

    def additional_properties(
        validator: Any, value: Any, instance: Any, schema: Any
    ) -> Iterator[Any]:
        # Which properties are "additional" depends on patternProperties' regexes.
        if "patternProperties" in schema or additional is None:
            return iter(())
        return additional(validator, value, instance, schema)  # type: ignore[no-any-return]

    return extend(
        cls,
        {
            "pattern": skip,
            "patternProperties": skip,
            "additionalProperties": additional_properties,
        },
    )
