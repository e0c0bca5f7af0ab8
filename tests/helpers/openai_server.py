"""A real OpenAI chat-completions server on 127.0.0.1, scripted reply by reply.

    with OpenAIServer() as server:
        server.enqueue(text_reply("Hello"), tool_calls_reply(tool_call("c1", "read", {})))
        provider = Provider(ProviderConfig(model="test/model", base_url=server.base_url))
        ...
        assert server.requests[0].body["stream"] is True

Each reply is a JSON-able dict built by the helpers below. A reply is served as SSE when
the request says `"stream": true` (split into many small chunks: tool-call arguments
arrive in pieces) and as one JSON object otherwise. Every request is recorded (headers,
raw and parsed body) and validated the way real providers validate a conversation;
an invalid request gets a 400 and does not consume a reply.

`OpenAIServer(context_limit=N)` answers 400 with OpenAI's "maximum context length" body
(vLLM words it the same way) to a valid request whose estimated tokens (its messages'
bytes / 4, rounded up) pass N, without consuming a reply. How it counts and
how it overflows can be set as each real server does: `token_bytes=B` counts the
messages and tools at B bytes a token (a tokenizer denser than the client's estimate);
`overflow` is "refuse" (the 400 above), "refuse-bare" (a 400 that states no number),
"empty-stream" (llama-cpp-python: a streamed request gets 200 and no event, on a
connection that hangs up on the next request; an unstreamed one the 400), or
"truncate" (Ollama: the start of the prompt is cut, the reply served, its prompt_tokens
the limit). `count_usage=True` reports the server's own
count as every reply's prompt_tokens. `turns="alternating"` refuses, as the strictest
chat templates do, a system message not first or a second one, a conversation whose
first turn is not the user's, and two user or two assistant turns in a row.
`responder(body)` makes the reply when none is scripted. `invalid_requests`
lists what was refused as an invalid conversation, so a test (or the
`strict_server` fixture) can assert the client never sent one. `GET /models` lists
`server.models` (OpenRouter/vLLM/llama.cpp entries: see `model_entry`), or serves
`server.models_reply` when a test scripts one; `GET /props` (llama.cpp) and
`GET /api/ps` (Ollama), beside /v1, serve `server.props` and `server.ps` when a test
sets them (404 otherwise, as other servers answer).

`hold` makes a reply wait before it is served (or, with `hold_after`, after its first
chunks) on a `threading.Event`, or on the server's `release()` when the reply comes from
a JSON script; `wait_for_requests(n)` blocks until n requests have arrived.

Standalone, for crash tests that need the server in another process:

    python tests/helpers/openai_server.py --script replies.json --port-file PORT [--log req.jsonl]

serves the JSON list of replies in order, writes its port to PORT once listening, logs
each request as one JSON line, and stops on SIGTERM/SIGINT. `POST /_control/release`
releases held replies.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Reply = dict[str, Any]

MODEL = "test/model"
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


# ---------------------------------------------------------------- reply builders


def usage(
    prompt: int = 12,
    completion: int = 5,
    *,
    cost: float | None = None,
    cached: int | None = None,
    reasoning: int | None = None,
) -> dict[str, Any]:
    """A wire `usage` object; `cost` only when given (OpenRouter sends it, others don't)."""
    wire: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        wire["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning is not None:
        wire["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    if cost is not None:
        wire["cost"] = cost
    return wire


DEFAULT_USAGE = usage()


def tool_call(call_id: str, name: str, arguments: Mapping[str, Any] | str) -> dict[str, Any]:
    """`arguments` as the model would send them: a dict is encoded, a str sent verbatim
    (so malformed JSON can be scripted)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "name": name, "arguments": raw}


def completion_reply(
    *,
    content: str | None = None,
    reasoning: str | None = None,
    reasoning_field: str = "reasoning",
    refusal: str | None = None,
    tool_calls: Sequence[Mapping[str, Any]] = (),
    finish_reason: str | None = "stop",
    usage: Mapping[str, Any] | None = DEFAULT_USAGE,
    model: str = MODEL,
    hold: threading.Event | bool | None = None,
    hold_after: int | None = None,
    **stream_options: Any,
) -> Reply:
    """One assistant answer. `stream_options` shape the SSE rendering:

    chunk_size (chars per text/arguments piece, default 3), comments (OpenRouter
    keep-alive comments), data_prefix ("data: " or "data:"), newline ("\\n", "\\r\\n"),
    omit_index, repeat_id_name, whole_tool_calls, interleave (parallel calls' argument
    pieces alternate), null_content (`content: null` in tool deltas), usage_every_chunk,
    finish_with_last (finish_reason on the last content chunk instead of its own),
    always_usage (send usage even when not asked), done (send [DONE], default True),
    drop_after (close the connection after n events), error_after ({"after": n,
    "error": {...}}: an error object mid-stream), split_bytes (write each event in
    n-byte pieces).
    """
    reply: Reply = {
        "kind": "completion",
        "message": {
            "content": content,
            "reasoning": reasoning,
            "reasoningField": reasoning_field,
            "refusal": refusal,
            "toolCalls": [dict(c) for c in tool_calls],
        },
        "finishReason": finish_reason,
        "usage": dict(usage) if usage is not None else None,
        "model": model,
        "options": stream_options,
    }
    if hold is not None:
        reply["hold"] = hold
    if hold_after is not None:
        reply["holdAfter"] = hold_after
    return reply


def text_reply(text: str, **kwargs: Any) -> Reply:
    return completion_reply(content=text, **kwargs)


def tool_calls_reply(*calls: Mapping[str, Any], **kwargs: Any) -> Reply:
    kwargs.setdefault("finish_reason", "tool_calls")
    return completion_reply(tool_calls=calls, **kwargs)


def error_reply(
    status: int,
    message: str = "scripted error",
    *,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    code: Any = None,
) -> Reply:
    """An HTTP error with an OpenAI/OpenRouter-style body (or `body` verbatim)."""
    if body is None:
        body = {"error": {"code": status if code is None else code, "message": message}}
    return {"kind": "error", "status": status, "body": body, "headers": dict(headers or {})}


def raw_reply(
    body: str, *, status: int = 200, content_type: str | None = "text/event-stream"
) -> Reply:
    """Bytes exactly as given (a stream without choices, HTML, broken JSON, ...)."""
    return {"kind": "raw", "status": status, "contentType": content_type, "body": body}


def drop_reply(text: str, *, after: int = 2, **kwargs: Any) -> Reply:
    """A stream whose connection is closed after `after` events, mid-answer."""
    return text_reply(text, drop_after=after, **kwargs)


def stream_error_reply(
    text: str, *, after: int = 2, code: Any = 502, message: str = "Provider returned error"
) -> Reply:
    """OpenRouter's mid-stream failure: a 200 stream, then a chunk with an error object."""
    return text_reply(
        text, error_after={"after": after, "error": {"code": code, "message": message}}
    )


def model_entry(model: str = MODEL, **fields: Any) -> dict[str, Any]:
    """One `GET /models` entry. The window where each server puts it:
    `context_length=N` (OpenRouter), `max_model_len=N` (vLLM), `meta={"n_ctx_train": N}`
    (llama.cpp); none at all (Ollama's /v1/models)."""
    return {"id": model, "object": "model", "created": 0, "owned_by": "test", **fields}


def context_length_body(limit: int, tokens: int) -> dict[str, Any]:
    """OpenAI's answer to a conversation that does not fit (vLLM's reads the same)."""
    return {
        "error": {
            "message": (
                f"This model's maximum context length is {limit} tokens. However, your "
                f"messages resulted in {tokens} tokens. Please reduce the length of the "
                "messages."
            ),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def estimated_tokens(body: Mapping[str, Any]) -> int:
    """The request's messages as compact ASCII JSON, one token per 4 bytes."""
    size = sum(len(json.dumps(m, separators=(",", ":"))) for m in body.get("messages", ()))
    return (size + 3) // 4


# ---------------------------------------------------------------- validation


def is_summarization(body: object) -> bool:
    """A compaction's request: no tools, and a system message asking for a summary."""
    if not isinstance(body, dict) or body.get("tools"):
        return False
    messages = body.get("messages") or [{}]
    first = messages[0] if isinstance(messages[0], dict) else {}
    return first.get("role") == "system" and "summarize" in str(first.get("content", ""))


def server_tokens(body: Mapping[str, Any], token_bytes: float | None) -> int:
    """The request's tokens as the server counts them (see `OpenAIServer`)."""
    if token_bytes is None:
        return estimated_tokens(body)
    size = len(json.dumps(body.get("messages", []), separators=(",", ":")))
    size += len(json.dumps(body.get("tools", []), separators=(",", ":")))
    return int(size / token_bytes) + 1


def validate_turns(messages: Sequence[Any]) -> str | None:
    """What a strict chat template (Gemma's, Mistral's) refuses, or None."""
    roles = [m.get("role") for m in messages if isinstance(m, dict)]
    if "system" in roles[1:] or "developer" in roles:
        return "Jinja Exception: System message must be at the beginning."
    turns = [r for r in roles if r != "system"]
    if turns and turns[0] != "user":
        return "Conversation roles must alternate user/assistant/user/assistant/..."
    for before, after in itertools.pairwise(turns):
        if before == after and before in ("user", "assistant"):
            return "Conversation roles must alternate user/assistant/user/assistant/..."
    return None


def validate_request(body: object) -> str | None:
    """What a strict provider would answer 400 for, or None when the request is fine."""
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    if "tools" in body:
        tools = body["tools"]
        if not isinstance(tools, list) or not tools:
            return "[] is too short - 'tools'"
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) else None
            if tool.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
                return f"Invalid 'tools[{i}]': expected a function tool with a name."
    if "stream_options" in body and body.get("stream") is not True:
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "[] is too short - 'messages'"
    pending: dict[str, None] | None = None  # tool_call ids still to be answered
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"Invalid type for 'messages[{i}]': expected an object."
        role = message.get("role")
        if role not in ROLES:
            return (
                f"Invalid value: {role!r}. Supported values are: {sorted(ROLES)} "
                f"('messages[{i}].role')."
            )
        if role == "tool":
            if pending is None:
                return (
                    f"Invalid parameter: messages with role 'tool' must be a response to a "
                    f"preceding message with 'tool_calls' ('messages[{i}]')."
                )
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in pending:
                return (
                    f"Invalid parameter: 'tool_call_id' of {call_id!r} not found in "
                    "'tool_calls' of previous message."
                )
            del pending[call_id]
            if not isinstance(message.get("content"), str | list):
                return f"Invalid type for 'messages[{i}].content': expected a string."
            continue
        if pending:
            return _unanswered(pending)
        pending = None
        if role == "assistant" and "tool_calls" in message:
            problem = _tool_calls_problem(i, message)
            if problem:
                return problem
            pending = {call["id"]: None for call in message["tool_calls"]}
        elif role in ("system", "developer", "user") and not isinstance(
            message.get("content"), str | list
        ):
            return f"Invalid type for 'messages[{i}].content': expected a string."
    if pending:
        return _unanswered(pending)
    return None


def _unanswered(pending: Mapping[str, None]) -> str:
    return (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(pending)
    )


def _tool_calls_problem(i: int, message: Mapping[str, Any]) -> str | None:
    calls = message["tool_calls"]
    if not isinstance(calls, list) or not calls:
        return f"[] is too short - 'messages[{i}].tool_calls'"
    if message.get("content") is None:
        return f'messages[{i}]: an assistant message with tool_calls has content null; send "".'
    seen: set[str] = set()
    for j, call in enumerate(calls):
        where = f"messages[{i}].tool_calls[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
            return f"Missing required parameter: '{where}.id'."
        if call.get("type") != "function" or not isinstance(fn, dict):
            return f"Invalid value for '{where}.type': expected 'function'."
        if not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            return f"Invalid '{where}.function': name and arguments must be strings."
        if call["id"] in seen:
            return f"Duplicate tool call id {call['id']!r} in 'messages[{i}]'."
        seen.add(call["id"])
    return None


# ---------------------------------------------------------------- rendering


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def json_body(reply: Reply, created: int) -> dict[str, Any]:
    m = reply["message"]
    message: dict[str, Any] = {"role": "assistant", "content": m["content"]}
    if m["reasoning"] is not None:
        message[m["reasoningField"]] = m["reasoning"]
    if m["refusal"] is not None:
        message["refusal"] = m["refusal"]
    if m["toolCalls"]:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in m["toolCalls"]
        ]
    body: dict[str, Any] = {
        "id": f"gen-{created}",
        "object": "chat.completion",
        "created": created,
        "model": reply["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": reply["finishReason"]}],
    }
    if reply["usage"] is not None:
        body["usage"] = reply["usage"]
    return body


def stream_chunks(reply: Reply, created: int, *, include_usage: bool) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects of one reply, in order."""
    m, opts = reply["message"], reply["options"]
    size = int(opts.get("chunk_size", 3))
    base = {
        "id": f"gen-{created}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": reply["model"],
    }
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if m["reasoning"] is not None:
        deltas += [{m["reasoningField"]: p} for p in _pieces(m["reasoning"], size)]
    if m["content"] is not None:
        deltas += [{"content": p} for p in _pieces(m["content"], size)]
    if m["refusal"] is not None:
        deltas += [{"refusal": p} for p in _pieces(m["refusal"], size)]
    deltas += _tool_deltas(m["toolCalls"], size, opts)
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    if opts.get("finish_with_last"):
        chunks[-1]["choices"][0]["finish_reason"] = reply["finishReason"]
    else:
        chunks.append(
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reply["finishReason"]}]}
        )
    wire_usage = reply["usage"]
    if wire_usage is not None and (include_usage or opts.get("always_usage")):
        if opts.get("usage_every_chunk"):
            for n, chunk in enumerate(chunks):  # growing counts, as some servers send
                chunk["usage"] = {**wire_usage, "completion_tokens": n}
        chunks.append({**base, "choices": [], "usage": wire_usage})
    return chunks


def _tool_deltas(
    calls: Sequence[Mapping[str, Any]], size: int, opts: Mapping[str, Any]
) -> list[dict[str, Any]]:
    def entry(i: int, call: Mapping[str, Any], *, head: bool, arguments: str) -> dict[str, Any]:
        wire: dict[str, Any] = {"index": i, "function": {"arguments": arguments}}
        if head or opts.get("repeat_id_name"):
            wire["id"] = call["id"]
            wire["type"] = "function"
            wire["function"]["name"] = call["name"]
        if opts.get("omit_index"):
            del wire["index"]
        return wire

    def delta(*entries: dict[str, Any]) -> dict[str, Any]:
        d: dict[str, Any] = {"tool_calls": list(entries)}
        if opts.get("null_content"):
            d["content"] = None
        return d

    if opts.get("whole_tool_calls"):
        return [
            delta(entry(i, c, head=True, arguments=c["arguments"])) for i, c in enumerate(calls)
        ]
    pieces = [_pieces(c["arguments"], size) for c in calls]
    if not opts.get("interleave"):
        out = []
        for i, call in enumerate(calls):
            out.append(delta(entry(i, call, head=True, arguments="")))
            out += [delta(entry(i, call, head=False, arguments=p)) for p in pieces[i]]
        return out
    out = [delta(entry(i, c, head=True, arguments="")) for i, c in enumerate(calls)]
    for n in range(max((len(p) for p in pieces), default=0)):
        out += [
            delta(entry(i, c, head=False, arguments=pieces[i][n]))
            for i, c in enumerate(calls)
            if n < len(pieces[i])
        ]
    return out


# ---------------------------------------------------------------- the server


@dataclass
class RecordedRequest:
    index: int
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    raw: bytes
    body: Any  # parsed JSON, or None when the body was not JSON
    status: int | None = None  # what the server answered (None while in flight)
    outcome: str = "pending"  # served | dropped | client-gone | rejected | invalid | too-long
    problem: str | None = None  # why it was rejected, invalid or too long
    tokens: int | None = None  # estimated tokens of a valid chat request
    arrived: float = 0.0  # time.perf_counter() when its request line was read
    finished: threading.Event = field(default_factory=threading.Event, repr=False)

    def log_line(self) -> str:
        return json.dumps(
            {"index": self.index, "path": self.path, "headers": self.headers, "body": self.body},
            separators=(",", ":"),
        )


class _ClientGone(Exception):
    pass


class OpenAIServer:
    def __init__(
        self,
        *,
        port: int = 0,
        api_key: str | None = None,
        log_path: Path | str | None = None,
        hold_timeout: float = 30.0,
        context_limit: int | None = None,
        models: Sequence[Mapping[str, Any]] | None = None,
        token_bytes: float | None = None,
        overflow: str = "refuse",
        count_usage: bool = False,
        turns: str | None = None,
    ) -> None:
        self.api_key = api_key
        self.context_limit = context_limit
        self.token_bytes = token_bytes
        self.overflow = overflow
        self.count_usage = count_usage
        self.turns = turns
        self.responder: Callable[[Any], Reply] | None = None
        self.models = [dict(m) for m in models] if models is not None else [model_entry()]
        self.models_reply: Reply | None = None  # served to GET /models instead of the list
        self.props: dict[str, Any] | None = None  # llama.cpp's GET /props
        self.ps: dict[str, Any] | None = None  # Ollama's GET /api/ps
        self.hold_timeout = hold_timeout
        self._log_path = Path(log_path) if log_path is not None else None
        self._replies: deque[Reply] = deque()
        # Answers to summarization requests (compactions), when scripted apart: a long
        # scripted session need not know where its automatic compactions fall.
        self._summaries: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        # GET /models, kept apart: `requests` are the model's requests, one per attempt.
        self._listings: list[RecordedRequest] = []
        self._cond = threading.Condition()
        self._release = threading.Event()
        self._holds: list[threading.Event] = []
        # TCP connections: accepted so far, and still open (a client's keep-alive pool).
        self.connections = 0
        self.open_connections = 0
        self._httpd = _HTTPServer(("127.0.0.1", port), _Handler)
        self._httpd.app = self
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle
    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> OpenAIServer:
        self._thread = threading.Thread(
            # a short poll interval only makes close() prompt; nothing waits on it
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="openai-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self.release()
        with self._cond:
            for hold in self._holds:
                hold.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ script and records
    def enqueue(self, *replies: Reply) -> None:
        with self._cond:
            self._replies.extend(replies)

    @property
    def pending_replies(self) -> int:
        with self._cond:
            return len(self._replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._cond:
            return list(self._requests)

    @property
    def listings(self) -> list[RecordedRequest]:
        """The `GET /models` requests (a client asking for the model's context window)."""
        with self._cond:
            return list(self._listings)

    @property
    def invalid_requests(self) -> list[RecordedRequest]:
        """Requests refused as invalid conversations (what a real provider answers 400)."""
        return [r for r in self.requests if r.outcome == "invalid"]

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until at least n requests have arrived (not necessarily been answered)."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"{len(self._requests)} of {n} requests arrived in {timeout}s")
            return list(self._requests)

    def wait_for_open_connections(self, n: int, timeout: float = 10.0) -> None:
        """Block until exactly n connections are open (a client closed its pool)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.open_connections == n, timeout):
                raise TimeoutError(f"{self.open_connections} connections open, not {n}")

    def _connected(self, change: int) -> None:
        with self._cond:
            self.connections += max(change, 0)
            self.open_connections += change
            self._cond.notify_all()

    def release(self) -> None:
        """Let every reply scripted with `hold=True` (JSON scripts) go ahead."""
        self._release.set()

    def _record(self, request: RecordedRequest) -> None:
        with self._cond:
            request.index = len(self._requests)
            self._requests.append(request)
            if self._log_path is not None:
                with self._log_path.open("a", encoding="utf-8") as log:
                    log.write(request.log_line() + "\n")
            self._cond.notify_all()

    def enqueue_summaries(self, *replies: Reply) -> None:
        with self._cond:
            self._summaries.extend(replies)

    def _next_reply(self, body: Any = None) -> Reply | None:
        with self._cond:
            if self._summaries and is_summarization(body):
                return self._summaries.popleft()
            if self._replies:
                return self._replies.popleft()
        return self.responder(body) if self.responder is not None else None

    def _hold(self, reply: Reply) -> None:
        hold = reply.get("hold")
        event = self._release if hold is True else hold
        if isinstance(event, threading.Event):
            with self._cond:
                self._holds.append(event)
            event.wait(self.hold_timeout)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    app: OpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # many tiny SSE chunks must not wait for delayed ACKs
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read server.requests, not stderr

    dead = False  # the connection is as llama-cpp-python leaves it after an empty stream

    def parse_request(self) -> bool:
        self.arrived = time.perf_counter()  # the request line is in: the client's wait ends
        if self.dead:  # hung up on, unanswered
            self.close_connection = True
            return False
        return super().parse_request()

    def setup(self) -> None:
        super().setup()
        self.server.app._connected(+1)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.app._connected(-1)

    # ------------------------------------------------------------ plumbing
    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as exc:
            self.close_connection = True
            raise _ClientGone from exc

    def _send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self._write(data)

    def _chunk(self, data: bytes) -> None:
        self._write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    # ------------------------------------------------------------ routes
    def do_GET(self) -> None:
        app = self.server.app
        request = RecordedRequest(
            index=-1,
            method="GET",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            raw=b"",
            body=None,
        )
        with app._cond:
            app._listings.append(request)
        try:
            served = {"/props": app.props, "/api/ps": app.ps}.get(self.path)
            if served is not None:
                request.status, request.outcome = 200, "served"
                self._send_json(200, served)
            elif self.path not in ("/v1/models", "/models"):
                self._reject(request, 404, f"Not found: {self.path}", "not_found_error")
            elif app.api_key is not None and request.headers.get("authorization") != (
                f"Bearer {app.api_key}"
            ):
                self._reject(request, 401, "No auth credentials found", "authentication_error")
            elif app.models_reply is not None:
                reply = app.models_reply
                app._hold(reply)
                request.status, request.outcome = reply.get("status", 200), "served"
                if reply["kind"] == "raw":
                    self._send_raw(reply)
                elif reply["kind"] == "gzip":  # `body`: bytes already gzipped
                    self.send_response(reply["status"])
                    self.send_header("content-type", "application/json")
                    self.send_header("content-encoding", "gzip")
                    self.send_header("content-length", str(len(reply["body"])))
                    self.end_headers()
                    self._write(reply["body"])
                else:
                    self._send_json(reply["status"], reply["body"], reply["headers"])
            else:
                request.status, request.outcome = 200, "served"
                self._send_json(200, {"object": "list", "data": app.models})
        except _ClientGone:
            request.outcome = "client-gone"
        finally:
            request.finished.set()

    def do_POST(self) -> None:
        app = self.server.app
        raw = self._read_body()
        if self.path == "/_control/release":
            app.release()
            self._send_json(200, {"released": True})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        request = RecordedRequest(
            index=-1,
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            raw=raw,
            body=body,
            arrived=self.arrived,
        )
        app._record(request)
        try:
            self._answer(app, request)
        except _ClientGone:
            request.outcome = "client-gone"
        finally:
            request.finished.set()

    def _reject(
        self,
        request: RecordedRequest,
        status: int,
        message: str,
        kind: str,
        outcome: str = "rejected",
    ) -> None:
        request.status, request.outcome, request.problem = status, outcome, message
        self._send_json(
            status, {"error": {"message": message, "type": kind, "param": None, "code": None}}
        )

    def _answer(self, app: OpenAIServer, request: RecordedRequest) -> None:
        if self.path not in ("/v1/chat/completions", "/chat/completions"):
            self._reject(request, 404, f"Not found: {self.path}", "not_found_error")
            return
        if (
            app.api_key is not None
            and request.headers.get("authorization") != f"Bearer {app.api_key}"
        ):
            self._reject(request, 401, "No auth credentials found", "authentication_error")
            return
        if request.body is None:
            self._reject(
                request,
                400,
                "We could not parse the JSON body of your request.",
                "invalid_request_error",
            )
            return
        problem = validate_request(request.body)
        if problem is not None:
            self._reject(request, 400, problem, "invalid_request_error", "invalid")
            return
        if app.turns == "alternating":
            problem = validate_turns(request.body["messages"])
            if problem is not None:
                self._reject(request, 400, problem, "invalid_request_error", "invalid")
                return
        request.tokens = server_tokens(request.body, app.token_bytes)
        limit = app.context_limit
        counted = request.tokens
        if limit is not None and request.tokens > limit:
            if self._overflow(app, request, limit):
                return
            counted = limit  # "truncate": the start of the prompt is gone
        reply = app._next_reply(request.body)
        if reply is None:
            self._reject(request, 500, "openai_server: no scripted reply left", "server_error")
            return
        if app.count_usage and reply.get("usage") is not None:
            reply = {**reply, "usage": {**reply["usage"], "prompt_tokens": counted}}
        if reply.get("holdAfter") is None:
            app._hold(reply)
        request.status = reply.get("status", 200)
        request.outcome = "served"
        if reply["kind"] == "error":
            self._send_json(reply["status"], reply["body"], reply["headers"])
        elif reply["kind"] == "raw":
            self._send_raw(reply)
        elif request.body.get("stream") is True:
            self._send_stream(app, request, reply)
        else:
            self._send_json(200, json_body(reply, int(time.time())))

    def _overflow(self, app: OpenAIServer, request: RecordedRequest, limit: int) -> bool:
        """Answer a request past the limit as `app.overflow` says; False: serve it cut."""
        assert request.tokens is not None
        if app.overflow == "truncate":
            request.problem = f"truncated {request.tokens} tokens to {limit}"
            return False
        request.status, request.outcome = 400, "too-long"
        if app.overflow == "empty-stream" and request.body.get("stream") is True:
            request.status = 200
            request.problem = f"Requested tokens ({request.tokens}) exceed context window"
            self._send_raw(raw_reply(""))
            self.dead = True  # it closes the connection a moment later, unannounced
            return True
        if app.overflow == "refuse-bare":
            message = "the request exceeds the available context size, try increasing it"
            body: dict[str, Any] = {"error": {"code": 400, "message": message}}
        else:
            body = context_length_body(limit, request.tokens)
        request.problem = body["error"]["message"]
        self._send_json(400, body)
        return True

    def _send_raw(self, reply: Reply) -> None:
        data = reply["body"].encode()
        self.send_response(reply["status"])
        if reply["contentType"] is not None:
            self.send_header("content-type", reply["contentType"])
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self._write(data)

    def _send_stream(self, app: OpenAIServer, request: RecordedRequest, reply: Reply) -> None:
        opts = reply["options"]
        include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
        chunks = stream_chunks(reply, int(time.time()), include_usage=include_usage)
        prefix = str(opts.get("data_prefix", "data: "))
        nl = str(opts.get("newline", "\n"))
        events = [prefix + json.dumps(c) + nl + nl for c in chunks]
        error_after = opts.get("error_after")
        if error_after is not None:
            failed = {**chunks[0], "error": error_after["error"]}
            failed["choices"] = [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]
            events = [*events[: error_after["after"]], prefix + json.dumps(failed) + nl + nl]
        elif opts.get("done", True):
            events.append(prefix + "[DONE]" + nl + nl)
        if opts.get("comments"):
            events.insert(0, ": OPENROUTER PROCESSING" + nl + nl)
            events.insert(len(events) // 2, ": OPENROUTER PROCESSING" + nl + nl)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        drop_after, hold_after = opts.get("drop_after"), reply.get("holdAfter")
        split = opts.get("split_bytes")
        for n, event in enumerate(events):
            if n == drop_after:
                request.outcome = "dropped"
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if n == hold_after:
                app._hold(reply)
            data = event.encode()
            for piece in _split(data, int(split)) if split else [data]:
                self._chunk(piece)
        self._write(b"0\r\n\r\n")


def _split(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


# ---------------------------------------------------------------- standalone


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", type=Path, required=True, help="JSON list of replies")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path, help="written with the port once listening")
    parser.add_argument("--log", type=Path, help="one JSON line per request")
    parser.add_argument("--api-key", help="require 'Authorization: Bearer KEY'")
    parser.add_argument("--hold-timeout", type=float, default=300.0)
    parser.add_argument("--context-limit", type=int, help="answer 400 past N estimated tokens")
    args = parser.parse_args(argv)
    replies = json.loads(args.script.read_text(encoding="utf-8"))
    if not isinstance(replies, list):
        parser.error("--script must hold a JSON list of replies")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = OpenAIServer(
        port=args.port,
        api_key=args.api_key,
        log_path=args.log,
        hold_timeout=args.hold_timeout,
        context_limit=args.context_limit,
    )
    server.enqueue(*replies)
    with server:
        if args.port_file is not None:  # atomically: a reader never sees half a number
            tmp = args.port_file.with_name(args.port_file.name + ".tmp")
            tmp.write_text(str(server.port), encoding="ascii")
            tmp.replace(args.port_file)
        print(f"listening {server.port}", flush=True)  # a parent may read this line instead
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
