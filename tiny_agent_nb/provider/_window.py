"""The model's context window: what a server says when a request does not fit it (and
the numbers its words give), and the window its metadata reports.

No HTTP client here (`_client` asks the server); nothing imports httpx.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..session import MAX_WINDOW, MIN_WINDOW
from ._types import ProviderError

# How each server words "the request does not fit the context window" (status 400 unless
# said otherwise), and where the words come from:
#   OpenAI     {"error": {"message": "This model's maximum context length is 8192 tokens.
#              However, your messages resulted in 8227 tokens. ...", "type":
#              "invalid_request_error", "param": "messages", "code":
#              "context_length_exceeded"}}  (crewAIInc/crewAI-examples#121,
#              ChatGPTNextWeb/NextChat#2358; older: "..., however you requested 4231 tokens
#              (3975 in your prompt; 256 for the completion)", hwchase17/chat-your-data#10)
#   vLLM       "This model's maximum context length is 4096 tokens. However, you requested
#              4120 tokens (3120 in the messages, 1000 in the completion). ..." (vllm
#              vllm/entrypoints/openai/serving_engine.py, `_validate_input`), or "... and
#              your request has 2778 input tokens (8000 > 4096 - 2778)" (max_tokens too large)
#   llama.cpp  {"error": {"code": 400, "message": "request (4476 tokens) exceeds the
#              available context size (4096 tokens), try increasing it", "type":
#              "exceed_context_size_error", "n_prompt_tokens": 4476, "n_ctx": 4096}}
#              (ggml-org/llama.cpp tools/server/server-context.cpp sends it with
#              ERROR_TYPE_EXCEED_CONTEXT_SIZE, server-common.cpp `format_error_response`
#              maps that to 400 "exceed_context_size_error", server-task.cpp adds the two
#              counts); an input it cannot split: "input (N tokens) is larger than the max
#              context size (M tokens)"
#   llama-cpp-python  the library raises "Requested tokens (1203) exceed context window of
#              1024" (llama_cpp/llama.py); its server rewrites that into 400 "This model's
#              maximum context length is 1024 tokens. However, you requested 1520 tokens
#              (1203 in the messages, 317 in the completion). ..." (llama_cpp/server/
#              errors.py, `context_length_exceeded`), except in a stream, which has already
#              answered 200: the stream then ends with no event at all (`empty_stream`)
#   Ollama     cuts an over-long prompt silently (runner/ollamarunner/runner.go
#              `NewSequence` keeps num_keep tokens and the newest, logging "truncating
#              input prompt"; ollama/ollama#9452, #10368): caught by its usage instead
#              (agent/_window.py); where it refuses it says "the input length exceeds the
#              context length" or "input exceeds context length", without a number
#   OpenRouter passes the upstream message on with code 400, sometimes inside a 200 body:
#              "This endpoint's maximum context length is 131072 tokens. However, you
#              requested about 141607 tokens (...). Please reduce the length of either one,
#              or use the "middle-out" transform ..."  (Aider-AI/aider#3721)
_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_WORDS = re.compile(
    r"maximum context length|context[ _]length[ _]exceeded"
    r"|exceeds? (?:the )?(?:maximum |available )?context (?:length|size|window)"
    r"|larger than the max context size",
    re.IGNORECASE,
)


def is_context_length(error: object, said: str | None) -> bool:
    """Whether an error answer says the conversation is too long for the model.

    `error`: the answer's `error` object (or the whole body) when it was JSON; `said`:
    its message, or the body's text when it was not JSON."""
    if isinstance(error, Mapping):
        for value in (error.get("code"), error.get("type")):
            if isinstance(value, str) and value in _CONTEXT_CODES:
                return True
    return said is not None and _CONTEXT_WORDS.search(said) is not None


def context_too_long(
    said: str, status: int | None, error: object = None, *, full: str | None = None
) -> ProviderError:
    """Not retryable: the same request fails the same way until the context is smaller.
    It carries the window and the request's input tokens when the answer states them (`error`:
    the answer's error object, whose llama.cpp fields are read; `full`: its whole text,
    when `said` is cut short)."""
    where = f"HTTP {status}" if status is not None else "in its answer"
    numbers = context_numbers(error, full if full is not None else said)
    return ProviderError(
        # What happened only: the loop compacts and retries, and a surface that shows the
        # failure says what to do next (the kind, contextLength, is the reason).
        f"The conversation is too long for the model's context window ({where}: {said}). "
        "The session file is unchanged.",
        kind="contextLength",
        retryable=False,
        status=status,
        window=numbers.window,
        prompt_tokens=numbers.prompt_tokens,
    )


# The numbers are untrusted text: only a plain count of at most 9 digits, in a plausible
# range (MIN_WINDOW..MAX_WINDOW: a smaller "window" is a misreading), is believed. A count
# goes on past a comma followed by a digit: "1,000,000,000,000" is not read as 1,000,000.
_COUNT = r"(\d{1,3}(?:,\d{3}){1,2}|\d{1,9})(?!,?\d)"
_WINDOW_WORDS = (
    re.compile(r"maximum context length is " + _COUNT, re.IGNORECASE),  # OpenAI, vLLM, ...
    re.compile(r"available context size \(" + _COUNT + r" tokens?\)", re.IGNORECASE),
    re.compile(r"max context size \(" + _COUNT + r" tokens?\)", re.IGNORECASE),
    re.compile(r"exceed context window of " + _COUNT, re.IGNORECASE),  # llama-cpp-python
)
# The input alone, never a total with the completion's max_tokens (OpenRouter's can be
# the whole window): it calibrates the estimate of a request's tokens.
_PROMPT_WORDS = (
    re.compile(r"\(" + _COUNT + r" (?:in the messages|in your prompt|of text input)", re.I),
    re.compile(r"resulted in " + _COUNT + r" tokens", re.IGNORECASE),  # OpenAI
    re.compile(r"request has " + _COUNT + r" input tokens", re.IGNORECASE),  # vLLM
    re.compile(r"\brequest \(" + _COUNT + r" tokens?\)", re.IGNORECASE),  # llama.cpp
    re.compile(r"requested tokens \(" + _COUNT + r"\)", re.IGNORECASE),  # llama-cpp-python
)


@dataclass(frozen=True)
class ContextNumbers:
    """What a "too long" answer says in numbers: the window, and the input tokens of the
    refused request as the server counted them. None: not said."""

    window: int | None = None
    prompt_tokens: int | None = None


def context_numbers(error: object, said: str | None) -> ContextNumbers:
    """The window and the request's input tokens a "too long" answer states: llama.cpp's
    `n_ctx` and `n_prompt_tokens` members, else the first number each wording gives."""
    window = prompt = None
    if isinstance(error, Mapping):
        window = plausible_window(error.get("n_ctx"))
        prompt = _count(error.get("n_prompt_tokens"))
    text = said or ""
    if window is None:
        window = next(
            (w for p in _WINDOW_WORDS if (m := p.search(text)) and (w := _window_of(m))),
            None,
        )
    if prompt is None:
        prompt = next(
            (n for p in _PROMPT_WORDS if (m := p.search(text)) and (n := _count_of(m))),
            None,
        )
    return ContextNumbers(window, prompt)


def plausible_window(value: object) -> int | None:
    """`value` when it is an integer (not a bool) between MIN_WINDOW and MAX_WINDOW."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if MIN_WINDOW <= value <= MAX_WINDOW else None
    return None


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_WINDOW * 10:
        return value
    return None


def _window_of(match: re.Match[str]) -> int | None:
    return plausible_window(int(match.group(1).replace(",", "")))


def _count_of(match: re.Match[str]) -> int | None:
    return _count(int(match.group(1).replace(",", "")))


# Where each server states the window of the model it serves:
#   OpenRouter  `GET /models`: `context_length`   (openrouter.ai/docs, API reference: models)
#   vLLM        `GET /models`: `max_model_len`    (vllm entrypoints/openai ModelCard)
#   llama.cpp   `GET /props` (beside /v1): `default_generation_settings.n_ctx`, the window
#               it serves (tools/server README, "GET /props"); its `GET /models` has only
#               `meta.n_ctx_train`, the window the model was trained with, which
#               `--ctx-size` may make smaller: asked when /props says nothing
#   Ollama      `GET /api/ps` (beside /v1): `models[].context_length` of a loaded model
#               (api/types.go `ProcessModelResponse`; the num_ctx it runs with); its
#               /v1/models has none
#   llama-cpp-python  none (`/v1/models` lists ids only): its refusal says it
_LISTED: tuple[tuple[str, ...], ...] = (("context_length",), ("max_model_len",))
# Seconds the answers of all three may take together: a window is only a hint, asked
# before the first request of a kernel, and a cell must not wait long for it.
METADATA_SECONDS = 5.0
TRAINED = ("meta", "n_ctx_train")


@dataclass(frozen=True)
class Listed:
    """A window a listing gives, and whether it is the served one or only the trained one."""

    window: int
    trained: bool = False


def window_in_listing(raw: bytes, model: str) -> Listed | None:
    """The context window of `model` in a `GET /models` answer, or None when the answer
    is not a listing, does not list the model, or gives no plausible window for it."""
    data = _member(_parsed(raw), "data")
    if not isinstance(data, list):
        return None
    for entry in data:
        if not isinstance(entry, Mapping) or entry.get("id") != model:
            continue
        for path in (*_LISTED, TRAINED):
            window = plausible_window(_path(entry, path))
            if window is not None:
                return Listed(window, trained=path == TRAINED)
        return None
    return None


def window_in_props(raw: bytes) -> int | None:
    """llama.cpp's `GET /props`: the window its slots serve."""
    settings = _member(_parsed(raw), "default_generation_settings")
    return plausible_window(_member(settings, "n_ctx"))


def window_in_ps(raw: bytes, model: str) -> int | None:
    """Ollama's `GET /api/ps`: the window of `model` when it is loaded (else None)."""
    models = _member(_parsed(raw), "models")
    for entry in models if isinstance(models, list) else ():
        if isinstance(entry, Mapping) and model in (entry.get("name"), entry.get("model")):
            return plausible_window(entry.get("context_length"))
    return None


def _parsed(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _member(value: object, key: str) -> object:
    return value.get(key) if isinstance(value, Mapping) else None


def _path(value: object, path: Sequence[str]) -> object:
    for key in path:
        value = _member(value, key)
    return value
